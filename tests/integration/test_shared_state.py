"""Two gateways sharing routing state through a real redis-server (`state.backend: redis`).

A prompt routed by gateway A shows as held, on the backend A chose, in gateway B's
`/admin/route`; A's requests in flight and their queued prefill count in B's snapshots, a
backend A found down is forgotten by B, A's TTFTs teach B's model; with Redis killed both
keep answering (on local state) and say degraded; with Redis back, replication resumes.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from gateway.app import GatewayApp
from sim.workloads import synth_text
from tests.integration.conftest import StartGateway
from tests.support.fixture_types import StartEngines
from tests.support.redis_server import RedisServer
from tests.support.servers import ServerThread
from tests.support.waiting import wait_until

MODEL = "m1"


def _chat(seed: int) -> dict[str, Any]:
    system = synth_text(random.Random(seed), 400)  # ~2 KB: about 30 routing blocks
    return {
        "model": MODEL,
        "max_tokens": 2,
        "messages": [{"role": "system", "content": system}, {"role": "user", "content": "hi"}],
    }


def _gateways(
    start_gateway: StartGateway, urls: list[str], redis: RedisServer, n: int = 2
) -> list[tuple[GatewayApp, ServerThread]]:
    state = {"backend": "redis", "url": redis.url, "namespace": "test"}
    security = {"backend_header": "id"}
    return [
        start_gateway(urls, policy="prefix-aware", state=state, security=security) for _ in range(n)
    ]


def _matched(c: httpx.Client, body: dict[str, Any]) -> dict[str, int]:
    route = c.post("/admin/route", json=body).json()
    return {e["id"]: e["matched_blocks"] for e in route["endpoints"]}


def _send(c: httpx.Client, body: dict[str, Any]) -> str:
    r = c.post("/v1/chat/completions", json=body)
    assert r.status_code == 200, r.text
    return r.headers["x-kvgate-backend"]


@pytest.fixture
def pair(
    redis_server: RedisServer, start_gateway: StartGateway, fake_engines: StartEngines
) -> Iterator[list[tuple[GatewayApp, httpx.Client]]]:
    # redis_server first: it is stopped after the gateways (no outage logged at teardown).
    urls = [s.url for _, s in fake_engines(2)]
    clients = []
    for app, server in _gateways(start_gateway, urls, redis_server):
        clients.append((app, httpx.Client(base_url=server.url, timeout=10)))
    for app, _ in clients:
        wait_until(
            lambda a=app: a.runtime.shared.link is not None and a.runtime.shared.link.up, within=5
        )
    yield clients
    for _, c in clients:
        c.close()


def test_a_placement_made_by_one_gateway_is_known_to_the_other(
    pair: list[tuple[GatewayApp, httpx.Client]],
) -> None:
    (_, a), (_, b) = pair
    body = _chat(1)
    assert set(_matched(b, body).values()) == {0}
    chosen = _send(a, body)
    wait_until(lambda: _matched(b, body)[chosen] > 0, within=5)
    matched = _matched(b, body)
    assert matched[chosen] == _matched(a, body)[chosen] > 20
    assert [n for backend, n in matched.items() if backend != chosen] == [0]
    # B routes the same prompt where A sent it, and A learns nothing back from itself.
    assert _send(b, body) == chosen
    wait_until(lambda: b.get("/admin/backends").json()["state"]["events"]["published"] == 1)
    state_b = b.get("/admin/backends").json()["state"]
    assert state_b["backend"] == "redis" and not state_b["degraded"]
    assert (state_b["events"]["received"], state_b["events"]["applied"]) == (1, 1)
    wait_until(lambda: a.get("/admin/backends").json()["state"]["events"]["received"] == 1)
    metrics = a.get("/metrics").text
    assert "kvgate_state_redis_up 1.0" in metrics
    assert "kvgate_state_events_published_total 1.0" in metrics


def test_redis_down_routes_on_local_state_and_resumes_when_back(
    pair: list[tuple[GatewayApp, httpx.Client]], redis_server: RedisServer
) -> None:
    (_, a), (_, b) = pair
    redis_server.kill()
    for i in range(20):  # zero errors while Redis is gone
        for c in (a, b):
            _send(c, _chat(100 + i))
    for c in (a, b):
        wait_until(lambda c=c: c.get("/ready").json()["state"]["degraded"], within=5)
        ready = c.get("/ready")
        assert ready.status_code == 200  # local routing still works: ready, but degraded
        assert ready.json()["state"]["redis_up"] is False
        assert "kvgate_state_redis_up 0.0" in c.get("/metrics").text
    body = _chat(7)
    chosen = _send(a, body)  # queued while Redis is down ...
    redis_server.start()
    for c in (a, b):
        wait_until(lambda c=c: not c.get("/ready").json()["state"]["degraded"], within=10)
    # ... and replicated once it is back (the new server starts empty).
    wait_until(lambda: _matched(b, body)[chosen] > 0, within=10)
    body = _chat(8)
    chosen = _send(b, body)
    wait_until(lambda: _matched(a, body)[chosen] > 0, within=5)


def test_the_other_gateways_in_flight_requests_and_queued_prefill_count_while_reported(
    redis_server: RedisServer, start_gateway: StartGateway, fake_engines: StartEngines
) -> None:
    urls = [s.url for _, s in fake_engines(2, ttft_delay=2.5)]
    (app_a, server_a), (app_b, _) = _gateways(start_gateway, urls, redis_server)
    with ThreadPoolExecutor(1) as pool, httpx.Client(base_url=server_a.url, timeout=10) as a:
        pending = pool.submit(_send, a, _chat(3))
        wait_until(lambda: sum(b.in_flight for b in app_a.runtime.pool) == 1)
        busy = next(b.id for b in app_a.runtime.pool if b.in_flight)
        queued = app_a.runtime.pool.find(busy).pending_prefill_tokens  # type: ignore[union-attr]
        assert queued > 0
        started = time.monotonic()
        wait_until(lambda: app_b.runtime.shared.remote_in_flight() == {busy: 1}, within=2)
        assert time.monotonic() - started < 0.5  # reports go out as the counts change
        assert app_b.runtime.shared.load is not None and app_b.runtime.shared.load.peers == 1
        assert app_a.runtime.shared.remote_in_flight() == {}  # B has nothing in flight
        # B's scorers see A's request and its prefill on that backend.
        snap = app_b.runtime.pool.find(busy).snapshot(app_b.runtime.clock())  # type: ignore[union-attr]
        assert (snap.remote_in_flight, snap.remote_pending_prefill_tokens) == (1, queued)
        assert (snap.in_flight, snap.pending_prefill_tokens) == (0, 0)
        assert pending.result() == busy
    wait_until(lambda: app_b.runtime.shared.remote_in_flight() == {}, within=2)
    assert all(
        b.remote_in_flight == b.remote_pending_prefill_tokens == 0 for b in app_b.runtime.pool
    )


def test_a_backend_one_gateway_found_down_is_forgotten_by_the_other(
    pair: list[tuple[GatewayApp, httpx.Client]],
) -> None:
    (app_a, a), (_, b) = pair
    body = _chat(11)
    chosen = _send(a, body)
    wait_until(lambda: _matched(b, body)[chosen] > 0, within=5)
    app_a.services._backend_down(chosen)  # what A's prober does when the backend stops answering
    wait_until(lambda: _matched(b, body)[chosen] == 0, within=5)


def test_the_ttfts_one_gateway_sees_teach_the_others_model(
    pair: list[tuple[GatewayApp, httpx.Client]],
) -> None:
    (app_a, a), (app_b, _) = pair
    for i in range(12):
        body = {**_chat(300 + i % 3), "stream": True}
        with a.stream("POST", "/v1/chat/completions", json=body) as r:
            assert r.status_code == 200
            r.read()
    learned = [b.id for b in app_a.runtime.pool if b.id in app_a.runtime.stack.ttft_model._fit]
    assert learned  # A fitted a line for some backend ...
    for backend in learned:  # ... and B holds the same line, from A's points
        wait_until(lambda backend=backend: backend in app_b.runtime.stack.ttft_model._fit, within=5)
        a_line, b_line = (m.runtime.stack.ttft_model.coefficients(backend) for m in (app_a, app_b))
        assert b_line.overhead_s == pytest.approx(a_line.overhead_s)
        assert b_line.prefill_token_s == pytest.approx(a_line.prefill_token_s)


def test_a_gateway_that_joins_warms_its_mirror_before_it_is_ready(
    pair: list[tuple[GatewayApp, httpx.Client]],
    start_gateway: StartGateway,
    redis_server: RedisServer,
) -> None:
    (app_a, a), _ = pair
    body = _chat(5)
    chosen = _send(a, body)
    wait_until(lambda: a.get("/admin/backends").json()["state"]["events"]["published"] == 1)
    urls = [b.spec.url for b in app_a.runtime.pool]
    [(_, server_c)] = _gateways(start_gateway, urls, redis_server, n=1)
    with httpx.Client(base_url=server_c.url, timeout=10) as c:
        wait_until(lambda: c.get("/ready").status_code == 200, within=5)
        assert _matched(c, body)[chosen] > 20  # learnt from the stream's history


def test_a_redis_that_does_not_answer_slows_no_request(
    pair: list[tuple[GatewayApp, httpx.Client]], redis_server: RedisServer
) -> None:
    (_, a), (_, b) = pair
    redis_server.pause()
    try:
        for i in range(10):
            for c in (a, b):
                started = time.monotonic()
                _send(c, _chat(200 + i))
                assert time.monotonic() - started < 0.4  # no request waits on Redis (0.5 s)
        for c in (a, b):
            wait_until(lambda c=c: c.get("/ready").json()["state"]["degraded"], within=5)
    finally:
        redis_server.resume()
    for c in (a, b):
        wait_until(lambda c=c: not c.get("/ready").json()["state"]["degraded"], within=10)
    body = _chat(9)
    chosen = _send(a, body)
    wait_until(lambda: _matched(b, body)[chosen] > 0, within=5)
