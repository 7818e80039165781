"""Hostile requests against a real `kvgate serve`: oversized heads, odd and huge bodies.

What must hold: heads over the limits get 431 without reaching an engine, requests the
gateway does not serve get a 4xx (never a 500 or a traceback), and one client's attack
neither stalls other clients nor grows the gateway's memory, its log or its /metrics page.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress

import httpx
import orjson
import pytest

from tests.chaos.checks import CHAT, assert_survived, chat, is_openai_error, wait_for
from tests.chaos.conftest import StartGateway
from tests.support import misbehaviour
from tests.support.fixture_types import StartEngines
from tests.support.gateway_process import GatewayProcess, gateway_config
from tests.support.hostile import send_raw, status_of
from tests.support.raw_engine import RawEngine

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(180)]
RawEngines = Callable[..., RawEngine]


def _post_head(path: str, length: int, extra: str = "") -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nHost: kvgate\r\nContent-Type: application/json\r\n"
        f"Content-Length: {length}\r\nConnection: close\r\n{extra}\r\n"
    ).encode()


def _raw_post(port: int, body: bytes, extra: str = "", path: str = "/v1/chat/completions") -> bytes:
    return send_raw(port, _post_head(path, len(body), extra) + body, timeout=20.0)


@contextmanager
def _health_watch(gw: GatewayProcess) -> Iterator[list[float]]:
    """Polls GET /health every 50 ms in a thread; yields the latencies seen (a stall shows)."""
    latencies: list[float] = []
    stop = threading.Event()

    def poll() -> None:
        with httpx.Client(timeout=30.0) as client:
            while not stop.is_set():
                t0 = time.monotonic()
                with suppress(httpx.HTTPError):
                    client.get(gw.url + "/health")
                latencies.append(time.monotonic() - t0)
                stop.wait(0.05)

    thread = threading.Thread(target=poll, daemon=True)
    thread.start()
    try:
        yield latencies
    finally:
        stop.set()
        thread.join(35)


def test_ten_thousand_headers(gateway: StartGateway, fake_engines: StartEngines) -> None:
    [(engine, server)] = fake_engines(1)
    gw = gateway(gateway_config([server.url]))
    body = orjson.dumps(CHAT)
    extra = "".join(f"X-Chaos-{i}: v\r\n" for i in range(10_000))
    status = status_of(_raw_post(gw.port, body, extra))
    assert status == 431, f"10,000 headers: want 431, got {status}"
    assert not engine.inference_requests(), "the request reached the engine"
    assert_survived(gw)


def test_huge_header(
    gateway: StartGateway, fake_engines: StartEngines, figures: Callable[..., None]
) -> None:
    [(engine, server)] = fake_engines(1)
    gw = gateway(gateway_config([server.url]))
    body = orjson.dumps(CHAT)
    with _health_watch(gw) as latencies:
        answer = _raw_post(gw.port, body, "X-Huge: " + "a" * (16 << 20) + "\r\n")
        time.sleep(0.3)
    status = status_of(answer)
    figures(status=status, max_health_latency_s=round(max(latencies, default=0.0), 3))
    # A server may also close without answering once the head is over its limit.
    assert status in (431, None), (
        f"a 16 MB header: want 431 (or the connection closed), got {status}"
    )
    assert not engine.inference_requests(), "the request reached the engine"
    assert_survived(gw)


def _nested(depth: int, leaf: object) -> object:
    value = leaf
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize("depth", [300, 1000])
def test_deeply_nested_json(gateway: StartGateway, raw_engines: RawEngines, depth: int) -> None:
    engine = raw_engines(misbehaviour.well())
    gw = gateway(gateway_config([engine.url]))
    chat_body = {"model": "m1", "messages": [{"role": "user", "content": _nested(depth, "x")}]}
    prompt_body = {"model": "m1", "prompt": _nested(depth, 1)}
    for path, payload in (("/v1/chat/completions", chat_body), ("/v1/completions", prompt_body)):
        raw = _deep_json(payload, depth)
        resp = httpx.post(gw.url + path, content=raw, timeout=20.0)
        assert resp.status_code < 500, f"{path} nested {depth} deep: {resp.status_code} {resp.text}"
        if resp.status_code >= 400:
            assert is_openai_error(resp), f"not an OpenAI-shaped error: {resp.text[:300]}"
    assert_survived(gw)


def _deep_json(payload: dict[str, object], depth: int) -> bytes:
    """orjson refuses to write past depth 255, so the nested bodies are written by hand."""
    if "prompt" in payload:
        return b'{"model":"m1","prompt":' + b"[" * depth + b"1" + b"]" * depth + b"}"
    inner = b"[" * depth + b'"x"' + b"]" * depth
    return b'{"model":"m1","messages":[{"role":"user","content":' + inner + b"}]}"


def test_huge_message_list(
    gateway: StartGateway, raw_engines: RawEngines, figures: Callable[..., None]
) -> None:
    engine = raw_engines(misbehaviour.well())
    gw = gateway(gateway_config([engine.url], server={"max_body_bytes": 64 << 20}))
    count = 1_100_000  # ~33 MB of tiny messages
    body = b'{"model":"m1","messages":[' + b",".join([b'{"role":"user","content":"a"}'] * count)
    body += b"]}"
    rss0 = gw.rss_mb()
    with _health_watch(gw) as latencies:
        time.sleep(0.2)
        resp = httpx.post(gw.url + "/v1/chat/completions", content=body, timeout=60.0)
        time.sleep(0.2)
    stall = max(latencies, default=0.0)
    peak = gw.peak_rss_mb() - rss0
    figures(
        status=resp.status_code,
        max_health_latency_s=round(stall, 3),
        rss_peak_growth_mb=round(peak, 1),
    )
    assert resp.status_code < 500, f"{count} messages: {resp.status_code} {resp.text[:300]}"
    assert stall < 5.0, f"GET /health took {stall:.1f} s while {count} messages were hashed"
    assert_survived(gw)


def test_websocket_upgrade(gateway: StartGateway, fake_engines: StartEngines) -> None:
    [(_, server)] = fake_engines(1)
    gw = gateway(gateway_config([server.url]))
    for path in ("/v1/chat/completions", "/"):
        head = (
            f"GET {path} HTTP/1.1\r\nHost: kvgate\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
        )
        status = status_of(send_raw(gw.port, head.encode(), timeout=5.0))
        assert status is not None and 400 <= status < 500, f"WebSocket upgrade on {path}: {status}"
    assert_survived(gw)


def test_request_without_host(gateway: StartGateway, fake_engines: StartEngines) -> None:
    [(engine, server)] = fake_engines(1)
    gw = gateway(gateway_config([server.url]))
    body = orjson.dumps(CHAT)
    head = (
        "POST /v1/chat/completions HTTP/1.1\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    status = status_of(send_raw(gw.port, head.encode() + body, timeout=10.0))
    assert status == 400, f"HTTP/1.1 without Host: want 400, got {status}"
    assert not engine.inference_requests(), "the request reached the engine"
    assert_survived(gw)


def test_client_leaves_mid_upload(gateway: StartGateway, fake_engines: StartEngines) -> None:
    [(engine, server)] = fake_engines(1)
    gw = gateway(gateway_config([server.url], server={"access_log": True}))
    head = _post_head("/v1/chat/completions", 100_000, "X-Request-Id: chaos-upload\r\n")
    send_raw(gw.port, head + b'{"model":"m1","messages":[' + b" " * 1000, timeout=0.5)
    wait_for(lambda: "chaos-upload" in gw.log_text(), within=10.0)
    line = next(x for x in gw.log_text().splitlines() if "gateway.access [chaos-upload]" in x)
    entry = orjson.loads(line.split("gateway.access [chaos-upload] ", 1)[1])
    assert entry["status"] == 499, f"a client that left mid-upload was logged as {entry['status']}"
    assert not engine.inference_requests(), "a half-uploaded request reached the engine"
    assert_survived(gw)


def test_slow_reader_of_a_stream(
    gateway: StartGateway, fake_engines: StartEngines, figures: Callable[..., None]
) -> None:
    [(_, server)] = fake_engines(1, tokens=20_000)
    gw = gateway(gateway_config([server.url]))
    rss0 = gw.rss_mb()
    body = {**CHAT, "stream": True}
    received = b""
    with httpx.stream("POST", gw.url + "/v1/chat/completions", json=body, timeout=60.0) as resp:
        parts = resp.iter_raw(4096)
        received += next(parts)
        others = [chat(gw) for _ in range(10)]  # served while this reader stalls
        time.sleep(2.0)
        rss_stalled = gw.rss_mb() - rss0
        for part in parts:
            received += part
            if len(received) % (1 << 20) < 4096:
                time.sleep(0.05)  # and then reads slowly
    figures(stream_bytes=len(received), rss_growth_while_stalled_mb=round(rss_stalled, 1))
    assert [r.status_code for r in others] == [200] * 10
    assert received.rstrip().endswith(b"data: [DONE]"), "the slow reader's stream was cut"
    assert rss_stalled < 100, f"gateway RSS grew {rss_stalled:.0f} MB buffering for a slow reader"
    assert_survived(gw)


def test_hundred_huge_model_names(
    gateway: StartGateway, fake_engines: StartEngines, figures: Callable[..., None]
) -> None:
    [(_, server)] = fake_engines(1)
    gw = gateway(gateway_config([server.url], server={"access_log": True}))
    log0 = len(gw.log_text())
    with httpx.Client(base_url=gw.url, timeout=20.0) as client:
        for i in range(100):
            name = f"{i:03d}" + "m" * 100_000
            resp = client.post("/v1/chat/completions", json={**CHAT, "model": name})
            assert resp.status_code == 404, f"unknown model: want 404, got {resp.status_code}"
    metrics = len(httpx.get(gw.url + "/metrics", timeout=10.0).content)
    logged = len(gw.log_text()) - log0
    figures(metrics_bytes=metrics, log_bytes=logged)
    assert metrics < 1_000_000, f"/metrics grew to {metrics} bytes from client-chosen model names"
    assert logged < 2_000_000, f"100 requests wrote {logged} bytes of log"
    assert_survived(gw)


def test_method_not_allowed_names_allow(gateway: StartGateway, fake_engines: StartEngines) -> None:
    [(_, server)] = fake_engines(1)
    gw = gateway(gateway_config([server.url]))
    resp = httpx.get(gw.url + "/v1/chat/completions", timeout=10.0)
    assert resp.status_code == 405
    assert "POST" in resp.headers.get("allow", ""), f"405 without Allow: {dict(resp.headers)}"
    assert_survived(gw)
