"""Failure handling: disconnects, failover, broken streams, bad input, health ejection."""

from __future__ import annotations

import socket
import threading

import httpx
import orjson
import pytest

from tests.integration.conftest import StartGateway
from tests.support.fixture_types import StartEngines
from tests.support.servers import dead_url
from tests.support.waiting import wait_until

CHAT = {"model": "m1", "messages": [{"role": "user", "content": "hello"}]}


def _backend(gw_client: httpx.Client, backend_id: str) -> dict:
    for b in gw_client.get("/admin/backends").json()["backends"]:
        if b["id"] == backend_id:
            return b
    raise AssertionError(backend_id)


def test_client_disconnect_mid_stream_cancels_upstream(
    fake_engines: StartEngines, start_gateway: StartGateway, client
) -> None:
    [(engine, s1)] = fake_engines(1, tokens=200, token_delay=0.02)
    app, gw = start_gateway([s1.url])
    c = client(gw)
    with c.stream("POST", "/v1/chat/completions", json={**CHAT, "stream": True}) as r:
        lines = r.iter_lines()
        assert next(lines).startswith("data: ")
    c.close()  # drop the connection, as a client that goes away does
    wait_until(lambda: engine.cancelled == 1)
    assert engine.completed == 0
    wait_until(lambda: app.runtime.pool.get(s1.url[7:]).in_flight == 0)


def test_client_disconnect_while_waiting_cancels_upstream(
    fake_engines: StartEngines, start_gateway: StartGateway, client
) -> None:
    """A non-streaming request abandoned during a long prefill is aborted upstream too."""
    [(engine, s1)] = fake_engines(1, ttft_delay=30.0)
    _, gw = start_gateway([s1.url])
    body = orjson.dumps(CHAT)
    head = (
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: gw\r\n"
        b"content-type: application/json\r\ncontent-length: %d\r\n\r\n" % len(body)
    )
    with socket.create_connection(("127.0.0.1", gw.port), timeout=5) as conn:
        conn.sendall(head + body)
        # Leave only once the engine holds the request: a client that gives up before
        # the gateway has dispatched it tests something else (nothing to cancel).
        wait_until(lambda: engine.running == 1, within=20.0)
    wait_until(lambda: engine.cancelled == 1, within=20.0)
    assert engine.completed == 0


def test_failover_from_dead_backend(
    fake_engines: StartEngines, start_gateway: StartGateway, client
) -> None:
    [(engine, s1)] = fake_engines(1)
    dead = dead_url()
    # Passive ejection is disabled so every other request really hits the dead backend first.
    _, gw = start_gateway([dead, s1.url], health={"passive_fail_threshold": 100})
    c = client(gw)
    for _ in range(6):
        r = c.post("/v1/chat/completions", json=CHAT)
        assert r.status_code == 200
        assert r.headers["x-fake-engine"] == engine.name
    assert len(engine.inference_requests()) == 6


def test_failover_on_503_before_any_byte(
    fake_engines: StartEngines, start_gateway: StartGateway, client
) -> None:
    (bad, s1), (good, s2) = fake_engines(2)
    _, gw = start_gateway([s1.url, s2.url], health={"passive_fail_threshold": 100})
    bad.fail_status = 503
    c = client(gw)
    for _ in range(4):
        r = c.post("/v1/chat/completions", json=CHAT)
        assert r.status_code == 200 and r.headers["x-fake-engine"] == good.name
    assert len(bad.inference_requests()) == 2  # round-robin put every other request there first
    text = c.get("/metrics").text
    assert 'kvgate_retries_total{model="m1"} 2.0' in text


def test_attempts_are_bounded_and_last_answer_passed_through(
    fake_engines: StartEngines, start_gateway: StartGateway, client
) -> None:
    engines = fake_engines(3)
    for e, _ in engines:
        e.fail_status = 503
    _, gw = start_gateway(
        [s.url for _, s in engines],
        upstream={"max_attempts": 2},
        health={"passive_fail_threshold": 100},
    )
    r = client(gw).post("/v1/chat/completions", json=CHAT)
    assert r.status_code == 503
    assert "error" in r.json()
    assert sum(len(e.inference_requests()) for e, _ in engines) == 2


def test_500_is_not_retried(
    fake_engines: StartEngines, start_gateway: StartGateway, client
) -> None:
    (e1, s1), (e2, s2) = fake_engines(2)
    e1.fail_status = e2.fail_status = 500
    _, gw = start_gateway([s1.url, s2.url])
    r = client(gw).post("/v1/chat/completions", json=CHAT)
    assert r.status_code == 500
    assert len(e1.inference_requests()) + len(e2.inference_requests()) == 1


def test_stream_dying_midway_ends_with_sse_error_event(
    fake_engines: StartEngines, start_gateway: StartGateway, client
) -> None:
    (engine, s1), (other, _s2) = fake_engines(2, tokens=10, token_delay=0.01)
    engine.die_after_tokens = 3
    _, gw = start_gateway([s1.url], health={"passive_fail_threshold": 100})
    with client(gw).stream("POST", "/v1/chat/completions", json={**CHAT, "stream": True}) as r:
        events = [line[6:] for line in r.iter_lines() if line.startswith("data: ")]
    chunks = [orjson.loads(e) for e in events[:-1]]
    assert sum(1 for ch in chunks if "tok" in str(ch["choices"])) == 3
    assert "[DONE]" not in events
    last = orjson.loads(events[-1])
    assert last["error"]["type"] == "upstream_error"
    assert not other.inference_requests()  # never retried once streaming began


@pytest.mark.parametrize(
    ("body", "headers", "status", "code"),
    [
        (b"{not json", {}, 400, "invalid_json"),
        (b"[1, 2]", {}, 400, "invalid_json"),
        (b"", {}, 400, "invalid_json"),
        (b'{"messages": []}', {}, 400, "missing_field"),
        (b'{"model": 7, "messages": []}', {}, 400, "invalid_field_type"),
        (b'{"model": "m1"}', {}, 400, "missing_field"),
        (b'{"model": "m1", "messages": "hi"}', {}, 400, "invalid_field_type"),
        (b'{"model": "m1", "messages": [], "stream": "yes"}', {}, 400, "invalid_field_type"),
        (
            b'{"model": "m1", "messages": []}',
            {"content-type": "text/plain"},
            415,
            "unsupported_media_type",
        ),
        (b'{"model": "m1", "messages": ["' + b"x" * 5000 + b'"]}', {}, 413, "payload_too_large"),
    ],
)
def test_bad_input_gets_openai_error_and_gateway_keeps_serving(
    fake_engines: StartEngines,
    start_gateway: StartGateway,
    client,
    body: bytes,
    headers: dict[str, str],
    status: int,
    code: str,
) -> None:
    [(engine, s1)] = fake_engines(1)
    _, gw = start_gateway([s1.url], server={"max_body_bytes": 4096})
    c = client(gw)
    sent = {"content-type": "application/json", **headers}
    r = c.post("/v1/chat/completions", content=body, headers=sent)
    assert r.status_code == status
    assert r.headers["content-type"] == "application/json"
    err = r.json()["error"]
    assert set(err) == {"message", "type", "code"} and err["code"] == code
    assert "Traceback" not in err["message"]
    assert not engine.inference_requests()
    assert c.post("/v1/chat/completions", json=CHAT).status_code == 200


def test_completions_prompt_type_checked(
    fake_engines: StartEngines, start_gateway: StartGateway, client
) -> None:
    [(_, s1)] = fake_engines(1)
    _, gw = start_gateway([s1.url])
    r = client(gw).post("/v1/completions", json={"model": "m1", "prompt": 42})
    assert r.status_code == 400 and "prompt" in r.json()["error"]["message"]


def test_unknown_route_and_wrong_method(
    fake_engines: StartEngines, start_gateway: StartGateway, client
) -> None:
    [(_, s1)] = fake_engines(1)
    _, gw = start_gateway([s1.url])
    c = client(gw)
    r = c.get("/v1/nothing")
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
    r = c.get("/v1/chat/completions")
    assert r.status_code == 405 and r.json()["error"]["code"] == "method_not_allowed"


def test_no_healthy_backend_is_503_with_retry_after(
    fake_engines: StartEngines, start_gateway: StartGateway, client
) -> None:
    [(engine, s1)] = fake_engines(1)
    engine.health_status = 500
    _, gw = start_gateway([s1.url])
    c = client(gw)
    r = c.post("/v1/chat/completions", json=CHAT)
    assert r.status_code == 503
    assert r.headers["retry-after"] == "1"
    assert r.json()["error"]["code"] == "no_healthy_backend"
    assert c.get("/ready").status_code == 503
    assert c.get("/health").status_code == 200


def test_active_probe_ejects_and_readmits(
    fake_engines: StartEngines, start_gateway: StartGateway, client
) -> None:
    (sick, s1), (well, s2) = fake_engines(2)
    _, gw = start_gateway([s1.url, s2.url])
    c = client(gw)
    sick.health_status = 503
    wait_until(lambda: _backend(c, s1.url[7:])["health"] == "unhealthy")
    for _ in range(4):
        assert c.post("/v1/chat/completions", json=CHAT).headers["x-fake-engine"] == well.name
    sick.health_status = 200
    wait_until(lambda: _backend(c, s1.url[7:])["health"] == "healthy")
    served = {c.post("/v1/chat/completions", json=CHAT).headers["x-fake-engine"] for _ in range(4)}
    assert served == {sick.name, well.name}


def test_passive_ejection_with_backoff_and_readmission(
    fake_engines: StartEngines, start_gateway: StartGateway, client
) -> None:
    (flaky, s1), (well, s2) = fake_engines(2)
    _, gw = start_gateway([s1.url, s2.url], health={"ejection_base_s": 0.5})
    c = client(gw)
    flaky.fail_status = 503
    for _ in range(4):  # two of these hit the flaky backend first and fail over
        assert c.post("/v1/chat/completions", json=CHAT).status_code == 200
    state = _backend(c, s1.url[7:])
    assert state["health"] == "ejected"
    assert "503" in state["last_error"]
    before = len(flaky.inference_requests())
    for _ in range(4):
        assert c.post("/v1/chat/completions", json=CHAT).headers["x-fake-engine"] == well.name
    assert len(flaky.inference_requests()) == before  # no traffic while ejected
    flaky.fail_status = None
    wait_until(lambda: _backend(c, s1.url[7:])["health"] == "healthy", within=3.0)
    served = {c.post("/v1/chat/completions", json=CHAT).headers["x-fake-engine"] for _ in range(4)}
    assert flaky.name in served


def test_backend_killed_mid_run_is_failed_over(
    fake_engines: StartEngines, start_gateway: StartGateway, client
) -> None:
    (_e1, s1), (_e2, s2) = fake_engines(2)
    _, gw = start_gateway([s1.url, s2.url])
    c = client(gw)
    assert c.post("/v1/chat/completions", json=CHAT).status_code == 200
    s1.kill()
    codes = [c.post("/v1/chat/completions", json=CHAT).status_code for _ in range(6)]
    assert codes == [200] * 6


def test_concurrent_streams_all_complete(
    fake_engines: StartEngines, start_gateway: StartGateway, client
) -> None:
    engines = fake_engines(2, tokens=20, token_delay=0.005)
    app, gw = start_gateway([s.url for _, s in engines], policy="least-in-flight")
    results: list[int] = []

    def one() -> None:
        with httpx.Client(base_url=gw.url, timeout=10) as c:
            body = {**CHAT, "stream": True}
            with c.stream("POST", "/v1/chat/completions", json=body) as r:
                results.append(sum(1 for x in r.iter_lines() if ":tok" in x))

    threads = [threading.Thread(target=one) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [20] * 16
    assert sum(e.completed for e, _ in engines) == 16
    assert min(e.completed for e, _ in engines) >= 4  # least-in-flight spreads the burst
    wait_until(lambda: all(b.in_flight == 0 for b in app.runtime.pool))


def test_failed_attempts_teach_the_prefix_index_nothing(
    fake_engines: StartEngines, start_gateway: StartGateway, client
) -> None:
    """Only the backend that served a prompt is recorded as holding its blocks."""
    (bad, s1), (good, s2) = fake_engines(2)
    dead = dead_url()
    _, gw = start_gateway([dead, s1.url, s2.url], health={"passive_fail_threshold": 100})
    bad.fail_status = 503
    c = client(gw)
    long_chat = {"model": "m1", "messages": [{"role": "user", "content": "hello there " * 50}]}
    for _ in range(6):
        r = c.post("/v1/chat/completions", json=long_chat)
        assert r.status_code == 200 and r.headers["x-fake-engine"] == good.name
    assert len(bad.inference_requests()) > 0
    blocks = {
        b["url"]: b["prefix_index_blocks"] for b in c.get("/admin/backends").json()["backends"]
    }
    assert blocks == {dead: 0, s1.url: 0, s2.url: blocks[s2.url]} and blocks[s2.url] > 0
