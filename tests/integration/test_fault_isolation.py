"""Issue 15: one backend's odd answers never stop health checking; the loops are supervised."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest

from gateway.services import PROBE_LOOP
from health.prober import Prober
from tests.integration.conftest import StartGateway
from tests.support.exchange import Exchange
from tests.support.fake_engine import FakeEngine
from tests.support.servers import ServerThread
from tests.support.waiting import wait_until

# Two series of 1e308: their sum overflowed (OverflowError) in the vLLM adapter.
OVERFLOWING = 'vllm:num_requests_waiting{e="0"} 1e308\nvllm:num_requests_waiting{e="1"} 1e308\n'


class OddMetricsEngine(FakeEngine):
    """A fake engine whose /metrics page a test sets (None: the usual page)."""

    page: str | None = None

    async def _metrics(self, exchange: Exchange, body: Any) -> None:
        if self.page is None:
            await super()._metrics(exchange, body)
        else:
            await exchange.text(200, self.page, b"text/plain; version=0.0.4")


def _start(engine: FakeEngine) -> ServerThread:
    return ServerThread(engine.app).start()


def _backend(c: httpx.Client, backend_id: str) -> dict[str, Any]:
    return next(b for b in c.get("/admin/backends").json()["backends"] if b["id"] == backend_id)


def test_an_overflowing_metrics_page_does_not_stop_health_checking(
    start_gateway: StartGateway, client: Callable[..., httpx.Client]
) -> None:
    odd, good = OddMetricsEngine(name="odd"), FakeEngine(name="good")
    with _start(odd) as odd_server, _start(good) as good_server:
        app, gw = start_gateway(
            [{"url": odd_server.url, "id": "odd"}, {"url": good_server.url, "id": "good"}],
            health={"scrape_interval_s": 0.01},
        )
        c = client(gw)
        assert c.get("/ready").status_code == 200
        odd.page = OVERFLOWING
        # Read as unknown (old code: OverflowError, and every health loop stopped with it).
        wait_until(
            lambda: (m := app.runtime.pool.get("odd").metrics) is not None and m.waiting is None
        )
        # Health checking still runs: a backend going down is noticed, by the probe loop.
        good.health_status = 503
        wait_until(lambda: _backend(c, "good")["health"] == "unhealthy")
        ready = c.get("/ready").json()
        assert ready["loops"] == {
            PROBE_LOOP: "running",
            "metrics-scrapes": "running",
            "admission": "running",
            "backend-changes": "running",
        }
        assert _backend(c, "odd")["scrape_errors"] == 0


def test_ready_and_admin_report_the_loops(
    start_gateway: StartGateway, client: Callable[..., httpx.Client], fake_engines: Any
) -> None:
    [(_, s1)] = fake_engines(1)
    _, gw = start_gateway([s1.url])
    c = client(gw)
    ready = c.get("/ready")
    assert ready.status_code == 200
    assert ready.json()["loops"] == {
        PROBE_LOOP: "running",
        "metrics-scrapes": "running",
        "admission": "running",
        "backend-changes": "running",  # drained backends leave once idle
    }
    assert c.get("/admin/backends").json()["loops"] == ready.json()["loops"]


def test_a_crashing_probe_loop_is_not_ready_and_leaves_the_scrapes_running(
    start_gateway: StartGateway,
    client: Callable[..., httpx.Client],
    fake_engines: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def crash(self: Prober) -> None:
        raise RuntimeError("a bug in the probe loop")

    monkeypatch.setattr(Prober, "run", crash)
    [(engine, s1)] = fake_engines(1)
    app, gw = start_gateway([s1.url], health={"scrape_interval_s": 0.01})
    c = client(gw)
    wait_until(lambda: c.get("/ready").status_code == 503)
    assert c.get("/ready").json()["loops"][PROBE_LOOP] in ("restarting", "running")
    engine.waiting = 7  # the scrape loop still runs beside the crashing one
    wait_until(
        lambda: (m := app.runtime.pool.get(s1.url[7:]).metrics) is not None and m.waiting == 7
    )


def test_client_chosen_model_names_do_not_grow_metrics(
    start_gateway: StartGateway, client: Callable[..., httpx.Client], fake_engines: Any
) -> None:
    # Issue 15, defect 3: 100 names of 100 KB grew /metrics to 20 MB, never freed.
    [(_, s1)] = fake_engines(1)
    _, gw = start_gateway([s1.url])
    c = client(gw)
    chat = {"messages": [{"role": "user", "content": "hi"}]}
    c.post("/v1/chat/completions", json={**chat, "model": "m1"}).raise_for_status()
    c.post("/v1/chat/completions", json={**chat, "model": "unknown"})
    before = len(c.get("/metrics").content)
    for i in range(100):
        r = c.post("/v1/chat/completions", json={**chat, "model": f"{i}-{'x' * 10_000}"})
        assert r.status_code == 404
    page = c.get("/metrics").text
    assert len(page) - before < 200  # counts went up; no series was added
    assert "xxxx" not in page
    assert 'model="other",status="404"} 101.0' in page
