"""Prefill/decode pools through the front door: `kvgate serve` in front of an emulated P/D
fleet (`kvgate emulate --prefill 1 --decode 1`), vLLM's and SGLang's protocols."""

from __future__ import annotations

import contextlib
import re
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families

from sim.live.processes import ChildProcess, kvgate_command
from sim.workloads import synth_text
from tests.integration.conftest import StartGateway
from tests.support.asgi_types import Message, Receive, Scope, Send
from tests.support.fake_engine import FakeEngine
from tests.support.fixture_types import ServeApp, StartEngines
from tests.support.servers import ServerThread

MODEL = "kvgate-demo"


class Fleet:
    """An emulated P/D fleet in its own process: P's and D's URLs, P's bootstrap port."""

    def __init__(self, child: ChildProcess, lines: dict[str, str]) -> None:
        self.child = child
        self.prefill = lines["prefill"]
        self.decode = lines["decode"]
        self.bootstrap = int(lines["bootstrap"]) if "bootstrap" in lines else None


@contextlib.contextmanager
def _fleet(tmp_path: Path, protocol: str, *extra: str) -> Iterator[Fleet]:
    args = ["emulate", "--prefill", "1", "--decode", "1", "--port", "0"]
    args += ["--pd-protocol", protocol, "--speedup", "4", *extra]
    if protocol == "sglang":
        args += ["--bootstrap-port", "0"]
    child = ChildProcess(kvgate_command(*args), tmp_path / f"emulate-{protocol}.log").start()
    try:
        found: dict[str, str] = {}
        for m in child.wait_for_line(r"^replica \d+ \((prefill|decode)\): (http://\S+)", 2):
            found[m.group(1)] = m.group(2)
        if protocol == "sglang":
            [b] = child.wait_for_line(r"^replica \d+ \(prefill\) bootstrap: (\d+)")
            found["bootstrap"] = b.group(1)
        yield Fleet(child, found)
    finally:
        child.stop()


@pytest.fixture
def vllm_fleet(tmp_path: Path) -> Iterator[Fleet]:
    with _fleet(tmp_path, "vllm") as fleet:
        yield fleet


@pytest.fixture
def sglang_fleet(tmp_path: Path) -> Iterator[Fleet]:
    with _fleet(tmp_path, "sglang") as fleet:
        yield fleet


def _gateway(
    start_gateway: StartGateway, fleet: Fleet, protocol: str, mode: str = "always"
) -> ServerThread:
    prefill: dict[str, Any] = {"url": fleet.prefill, "role": "prefill"}
    if fleet.bootstrap is not None:
        prefill["bootstrap_port"] = fleet.bootstrap
    backends = [prefill, {"url": fleet.decode, "role": "decode"}]
    _, server = start_gateway(
        backends,
        policy="prefix-aware",
        disaggregation={"protocol": protocol, "mode": mode},
        health={"scrape_interval_s": 0.05},
    )
    _wait_ready(server.url)
    return server


def _wait_ready(url: str, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        r = httpx.get(url + "/ready")
        if r.status_code == 200 and r.json().get("healthy_backends", 0) >= 2:
            return
        time.sleep(0.05)
    raise TimeoutError(f"{url}: both backends not healthy after {timeout_s} s")


def _until(check: Callable[[], bool], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError("condition not met")
        time.sleep(0.02)


def _in_flight(url: str) -> dict[str, int]:
    """The gateway's requests in flight per backend id."""
    return {b["id"]: b["in_flight"] for b in httpx.get(url + "/admin/backends").json()["backends"]}


def _busy(url: str) -> float:
    m = _metrics(url)
    return m["vllm:num_requests_running"] + m["vllm:num_requests_waiting"]


def _metrics(url: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(httpx.get(url + "/metrics").text):
        for s in family.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(s.labels.items()) if k == "source")
            out[s.name + (f"{{{labels}}}" if labels else "")] = s.value
    return out


def _sources(url: str) -> tuple[float, float]:
    """(external_kv_transfer, local_compute) prompt tokens the engine counted."""
    m = _metrics(url)
    name = "vllm:prompt_tokens_by_source_total"
    return m[f"{name}{{source=external_kv_transfer}}"], m[f"{name}{{source=local_compute}}"]


def _prompt(seed: int, tokens: int = 800) -> str:
    import random

    return synth_text(random.Random(seed), tokens)


def _cached(body: dict[str, Any]) -> int | None:
    details = body["usage"].get("prompt_tokens_details") or {}
    return details.get("cached_tokens")


def test_vllm_whole_answers_take_both_legs_and_report_p_cache_hit(
    vllm_fleet: Fleet, start_gateway: StartGateway
) -> None:
    gw = _gateway(start_gateway, vllm_fleet, "vllm")
    ext0, _ = _sources(vllm_fleet.decode)
    prompt = _prompt(1)
    with httpx.Client(base_url=gw.url, timeout=30) as c:
        first = c.post("/v1/completions", json={"model": MODEL, "prompt": prompt, "max_tokens": 4})
        assert first.status_code == 200, first.text
        assert "x-kvgate-prefill-backend" in first.headers
        assert first.json()["usage"]["completion_tokens"] == 4
        ext1, _ = _sources(vllm_fleet.decode)
        assert ext1 - ext0 >= 700  # D received the prompt's blocks instead of computing them
        # The same prompt again: P holds it now, and the client hears P's hit.
        chat = {"model": MODEL, "messages": [{"role": "user", "content": prompt}]}
        again = c.post("/v1/completions", json={"model": MODEL, "prompt": prompt, "max_tokens": 4})
        assert again.status_code == 200
        p_hit = _cached(again.json())
        assert p_hit is not None and p_hit >= 700
        r = c.post("/v1/chat/completions", json={**chat, "max_tokens": 3})
        assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"]
    pd = _metrics(gw.url)
    assert pd["kvgate_pd_decisions_total"] >= 3


def test_vllm_streams_through_both_legs(vllm_fleet: Fleet, start_gateway: StartGateway) -> None:
    gw = _gateway(start_gateway, vllm_fleet, "vllm")
    ext0, _ = _sources(vllm_fleet.decode)
    body = {"model": MODEL, "prompt": _prompt(2), "max_tokens": 6, "stream": True}
    events = []
    with (
        httpx.Client(base_url=gw.url, timeout=30) as c,
        c.stream("POST", "/v1/completions", json=body) as r,
    ):
        assert r.status_code == 200
        assert "x-kvgate-prefill-backend" in r.headers
        events = [line for line in r.iter_lines() if line.startswith("data: ")]
    assert events[-1] == "data: [DONE]"
    assert not any('"usage"' in e for e in events)  # the usage event kvgate asked for is taken out
    assert len(events) >= 6
    ext1, _ = _sources(vllm_fleet.decode)
    assert ext1 - ext0 >= 700


def test_a_prefill_leg_without_transfer_params_falls_back_to_the_decoder(
    vllm_fleet: Fleet, start_gateway: StartGateway, fake_engines: StartEngines
) -> None:
    # P is an engine without the connector: it answers without kv_transfer_params.
    [(p, p_server)] = fake_engines(1, models=[MODEL])
    backends = [
        {"url": p_server.url, "role": "prefill"},
        {"url": vllm_fleet.decode, "role": "decode"},
    ]
    _, gw = start_gateway(backends, policy="prefix-aware", disaggregation={"mode": "always"})
    _wait_ready(gw.url)
    ext0, local0 = _sources(vllm_fleet.decode)
    with httpx.Client(base_url=gw.url, timeout=30) as c:
        r = c.post("/v1/completions", json={"model": MODEL, "prompt": _prompt(3), "max_tokens": 2})
    assert r.status_code == 200, r.text
    assert "x-kvgate-prefill-backend" not in r.headers
    assert [r.path for r in p.requests if r.method == "POST"] == ["/v1/completions"]  # P asked
    assert _metrics(gw.url)["kvgate_pd_prefill_fallbacks_total"] == 1
    ext1, local1 = _sources(vllm_fleet.decode)
    assert ext1 == ext0 and local1 - local0 >= 700  # D computed the prompt itself


def test_a_client_that_leaves_during_prefill_aborts_it_and_d_never_starts(
    tmp_path: Path, start_gateway: StartGateway
) -> None:
    with _fleet(tmp_path, "vllm", "--speedup", "0.05") as fleet:  # prefill takes seconds
        gw = _gateway(start_gateway, fleet, "vllm")
        body = {"model": MODEL, "prompt": _prompt(4, 1500), "max_tokens": 2}
        p_id = fleet.prefill.removeprefix("http://")
        errors: list[BaseException] = []

        def leave_early() -> None:
            try:
                httpx.post(gw.url + "/v1/completions", json=body, timeout=1.0)
            except httpx.ReadTimeout as exc:
                errors.append(exc)

        client = threading.Thread(target=leave_early)
        client.start()
        _until(lambda: _in_flight(gw.url).get(p_id) == 1)  # the prefill leg is out
        client.join()
        assert errors, "the prefill should still be running when the client leaves"
        # The gateway dropped P's connection at once (the engine aborts on it), and D
        # never got the request.
        _until(lambda: _in_flight(gw.url).get(p_id) == 0, timeout_s=1.0)
        assert sum(_in_flight(gw.url).values()) == 0
        assert _sources(fleet.decode) == (0, 0)
        assert _busy(fleet.decode) == 0


def test_conditional_keeps_a_short_prompt_on_the_decoder(
    vllm_fleet: Fleet, start_gateway: StartGateway
) -> None:
    gw = _gateway(start_gateway, vllm_fleet, "vllm", mode="conditional")
    with httpx.Client(base_url=gw.url, timeout=30) as c:
        r = c.post("/v1/completions", json={"model": MODEL, "prompt": "hi", "max_tokens": 2})
        assert r.status_code == 200
        assert "x-kvgate-prefill-backend" not in r.headers
        route = c.post("/admin/route", json={"model": MODEL, "prompt": "hi", "max_tokens": 2})
    pd = route.json()["disaggregation"]
    assert pd["split"] is False and pd["why"] == "cached"
    assert pd["decode"] == re.sub(r"^http://", "", vllm_fleet.decode)


def test_sglang_sends_both_legs_at_once_with_a_bootstrap_room(
    sglang_fleet: Fleet, start_gateway: StartGateway
) -> None:
    gw = _gateway(start_gateway, sglang_fleet, "sglang", mode="conditional")
    ext0, _ = _sources(sglang_fleet.decode)
    prompt = _prompt(5)
    with httpx.Client(base_url=gw.url, timeout=30) as c:
        r = c.post("/v1/completions", json={"model": MODEL, "prompt": prompt, "max_tokens": 3})
        assert r.status_code == 200, r.text
        assert "x-kvgate-prefill-backend" in r.headers
        body = {"model": MODEL, "prompt": prompt, "max_tokens": 3, "stream": True}
        with c.stream("POST", "/v1/completions", json=body) as s:
            lines = [line for line in s.iter_lines() if line.startswith("data: ")]
        assert lines[-1] == "data: [DONE]"
    ext1, _ = _sources(sglang_fleet.decode)
    assert ext1 - ext0 >= 1400  # both requests' whole prompts crossed: D keeps no cache


class _Handoff:
    """Wraps a fake engine: as P it answers every POST with `kv_transfer_params`; as D it
    answers 500 to a request carrying them (a KV load that failed) and serves the rest."""

    def __init__(self, engine: FakeEngine, *, prefill: bool) -> None:
        self.engine = engine
        self.prefill = prefill
        self.refused = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.engine.app(scope, receive, send)
            return
        chunks = []
        while True:
            message = await receive()
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        body = b"".join(chunks)
        if self.prefill:
            answer = {
                "id": "p",
                "object": "text_completion",
                "choices": [],
                "usage": {"prompt_tokens": 10, "completion_tokens": 1, "total_tokens": 11},
                "kv_transfer_params": {"do_remote_prefill": True, "remote_block_ids": [1]},
            }
            await _json(send, 200, answer)
        elif b"kv_transfer_params" in body:
            self.refused += 1
            await _json(send, 500, {"error": {"message": "handshake_setup_failed"}})
        else:
            sent = False

            async def replay() -> Message:
                nonlocal sent
                if sent:
                    return await receive()
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}

            await self.engine.app(scope, replay, send)


async def _json(send: Send, status: int, obj: dict[str, Any]) -> None:
    data = orjson.dumps(obj)
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": data})


def test_a_decoder_that_cannot_load_the_handoff_prefills_alone(
    serve_app: ServeApp, start_gateway: StartGateway
) -> None:
    p = _Handoff(FakeEngine(models=[MODEL], name="p"), prefill=True)
    d = _Handoff(FakeEngine(models=[MODEL], name="d"), prefill=False)
    p_url, d_url = serve_app(p).url, serve_app(d).url
    backends = [{"url": p_url, "role": "prefill"}, {"url": d_url, "role": "decode"}]
    _, gw = start_gateway(backends, policy="prefix-aware", disaggregation={"mode": "always"})
    _wait_ready(gw.url)
    with httpx.Client(base_url=gw.url, timeout=30) as c:
        r = c.post("/v1/completions", json={"model": MODEL, "prompt": _prompt(6), "max_tokens": 2})
    assert r.status_code == 200, r.text
    assert r.headers["x-fake-engine"] == "d"
    assert "x-kvgate-prefill-backend" not in r.headers
    assert d.refused == 1  # asked with P's handoff once, then without it
    assert _metrics(gw.url)["kvgate_pd_prefill_fallbacks_total"] == 1
