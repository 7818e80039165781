from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import httpx
import pytest
import respx

from health.pool import Backend, BackendPool, BackendSpec
from health.scraper import Scraper, ScrapeSettings
from health.state import HealthPolicy
from routing.types import EngineMetrics
from tests.unit.health.conftest import URL, FakeClock

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
VLLM_PAGE = (FIXTURES / "vllm-0.32" / "metrics_after.txt").read_text()
VLLM_METRICS = EngineMetrics(
    scraped_at=0.0, waiting=0, running=0, kv_usage=0.0, block_size=128, num_blocks=64
)


def _scraper(
    client: httpx.AsyncClient, clock: FakeClock, *specs: BackendSpec
) -> tuple[Scraper, BackendPool]:
    settings = ScrapeSettings()
    pool = BackendPool(
        specs or (BackendSpec(url=URL, engine="vllm"),),
        HealthPolicy(),
        clock,
        stale_after_s=settings.stale_after_s,
    )
    return Scraper(pool, client, settings), pool


def _backend(pool: BackendPool) -> Backend:
    return pool.get("engine:8000")


async def test_scrape_stores_the_parsed_metrics(
    mock: respx.MockRouter, client: httpx.AsyncClient, clock: FakeClock
) -> None:
    route = mock.get("/metrics").respond(200, text=VLLM_PAGE)
    scraper, pool = _scraper(client, clock)
    clock.now = 7.0
    assert await scraper.scrape_once(_backend(pool)) is True
    request = route.calls.last.request
    assert request.url == f"{URL}/metrics"
    assert request.extensions["timeout"]["read"] == 0.5
    expected = EngineMetrics(
        scraped_at=7.0, waiting=0, running=0, kv_usage=0.0, block_size=128, num_blocks=64
    )
    assert _backend(pool).metrics == expected
    assert pool.snapshots()[0].metrics == expected
    assert _backend(pool).scrape_errors == 0


async def test_each_scrape_replaces_the_metrics_object(
    mock: respx.MockRouter, client: httpx.AsyncClient, clock: FakeClock
) -> None:
    mock.get("/metrics").mock(
        side_effect=[
            httpx.Response(200, text="vllm:num_requests_waiting 1\n"),
            httpx.Response(200, text="vllm:num_requests_waiting 5\n"),
        ]
    )
    scraper, pool = _scraper(client, clock)
    await scraper.scrape_once(_backend(pool))
    first = _backend(pool).metrics
    clock.now = 0.05
    await scraper.scrape_once(_backend(pool))
    assert first == EngineMetrics(scraped_at=0.0, waiting=1)  # untouched
    assert _backend(pool).metrics == EngineMetrics(scraped_at=0.05, waiting=5)


async def test_trtllm_is_scraped_on_its_prometheus_path(
    mock: respx.MockRouter, client: httpx.AsyncClient, clock: FakeClock
) -> None:
    route = mock.get("/prometheus/metrics").respond(200, text="trtllm_num_requests_waiting 2\n")
    scraper, pool = _scraper(client, clock, BackendSpec(url=URL, engine="trtllm"))
    assert await scraper.scrape_once(_backend(pool)) is True
    assert route.call_count == 1
    assert _backend(pool).metrics == EngineMetrics(scraped_at=0.0, waiting=2)


@pytest.mark.parametrize(
    "answer",
    [
        httpx.Response(500, text=VLLM_PAGE),
        httpx.Response(404),
        httpx.Response(200, text='vllm:num_requests_waiting{engine="0" 3\n'),
        httpx.Response(200, text="vllm:num_requests_waiting many\n"),
        httpx.ConnectError("refused"),
        httpx.ReadTimeout("slow"),
    ],
)
async def test_failed_scrape_counts_an_error_and_keeps_the_old_metrics(
    answer: httpx.Response | Exception,
    mock: respx.MockRouter,
    client: httpx.AsyncClient,
    clock: FakeClock,
) -> None:
    mock.get("/metrics").mock(side_effect=[httpx.Response(200, text=VLLM_PAGE), answer, answer])
    scraper, pool = _scraper(client, clock)
    backend = _backend(pool)
    await scraper.scrape_once(backend)
    clock.now = 0.1
    assert await scraper.scrape_once(backend) is False
    assert await scraper.scrape_once(backend) is False
    assert backend.scrape_errors == 2
    assert backend.metrics == VLLM_METRICS


async def test_failures_are_logged_on_change_only(
    mock: respx.MockRouter,
    client: httpx.AsyncClient,
    clock: FakeClock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    mock.get("/metrics").mock(
        side_effect=[httpx.ConnectError("refused")] * 3 + [httpx.Response(200, text=VLLM_PAGE)]
    )
    scraper, pool = _scraper(client, clock)
    with caplog.at_level(logging.INFO, logger="health.scraper"):
        for _ in range(4):
            await scraper.scrape_once(_backend(pool))
    assert [r.getMessage() for r in caplog.records] == [
        "backend engine:8000: metrics scrape failed: ConnectError('refused')",
        "backend engine:8000: metrics scrape recovered",
    ]
    assert _backend(pool).scrape_errors == 3


async def test_stale_metrics_are_unknown_in_snapshots(
    mock: respx.MockRouter, client: httpx.AsyncClient, clock: FakeClock
) -> None:
    mock.get("/metrics").mock(
        side_effect=[httpx.Response(200, text=VLLM_PAGE), httpx.ConnectError("refused")]
    )
    scraper, pool = _scraper(client, clock)
    await scraper.scrape_once(_backend(pool))
    clock.now = 0.2  # exactly at the threshold: still fresh
    assert pool.snapshots()[0].metrics == VLLM_METRICS
    await scraper.scrape_once(_backend(pool))  # fails; the old metrics age on
    clock.now = 0.25
    assert pool.snapshots()[0].metrics is None
    assert _backend(pool).metrics == VLLM_METRICS  # kept, only hidden from scheduling


async def test_openai_backends_are_not_polled(
    mock: respx.MockRouter, client: httpx.AsyncClient, clock: FakeClock
) -> None:
    route = mock.get("/metrics").respond(200, text=VLLM_PAGE)
    scraper, pool = _scraper(
        client,
        clock,
        BackendSpec(url=URL, engine="openai"),
        BackendSpec(url="http://other:9000", engine="vllm"),
    )
    assert [b.id for b in scraper.polled()] == ["other:9000"]
    assert await scraper.scrape_once(_backend(pool)) is False
    assert route.call_count == 0
    assert _backend(pool).metrics is None
    assert _backend(pool).scrape_errors == 0


async def test_unknown_engine_is_rejected(client: httpx.AsyncClient, clock: FakeClock) -> None:
    with pytest.raises(ValueError, match="backend engine:8000: no adapter for engine 'tgi'"):
        _scraper(client, clock, BackendSpec(url=URL, engine="tgi"))


async def test_a_page_without_the_engines_metrics_is_reported_once(
    mock: respx.MockRouter,
    client: httpx.AsyncClient,
    clock: FakeClock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    mock.get("/metrics").respond(200, text=VLLM_PAGE)
    scraper, pool = _scraper(client, clock, BackendSpec(url=URL, engine="sglang"))
    with caplog.at_level(logging.WARNING, logger="health.scraper"):
        await scraper.scrape_once(_backend(pool))
        await scraper.scrape_once(_backend(pool))
    assert [r.getMessage() for r in caplog.records] == [
        "backend engine:8000: no sglang metrics at /metrics (the page looks like vllm)"
    ]
    assert _backend(pool).metrics == EngineMetrics(scraped_at=0.0)  # fresh, all unknown


async def test_run_polls_until_cancelled(
    mock: respx.MockRouter, client: httpx.AsyncClient, clock: FakeClock
) -> None:
    three_scrapes = asyncio.Event()

    def answer(request: httpx.Request) -> httpx.Response:
        if route.call_count >= 3:
            three_scrapes.set()
        return httpx.Response(200, text=VLLM_PAGE)

    route = mock.get("/metrics").mock(side_effect=answer)
    pool = BackendPool((BackendSpec(url=URL, engine="vllm"),), HealthPolicy(), clock)
    # interval 0: the loop only yields between scrapes, it never really sleeps.
    scraper = Scraper(pool, client, ScrapeSettings(interval_s=0.0))
    task = asyncio.create_task(scraper.run())
    await asyncio.wait_for(three_scrapes.wait(), 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert _backend(pool).metrics == VLLM_METRICS


async def test_run_returns_when_nothing_exports_metrics(
    client: httpx.AsyncClient, clock: FakeClock
) -> None:
    scraper, _ = _scraper(client, clock, BackendSpec(url=URL, engine="openai"))
    await asyncio.wait_for(scraper.run(), 1)


def test_without_a_threshold_metrics_never_go_stale(clock: FakeClock) -> None:
    pool = BackendPool((BackendSpec(url=URL, engine="vllm"),), HealthPolicy(), clock)
    _backend(pool).metrics = VLLM_METRICS
    clock.now = 1e6
    assert pool.snapshots()[0].metrics == VLLM_METRICS
    assert _backend(pool).snapshot(clock.now, stale_after_s=0.2).metrics is None


async def test_an_unchanged_page_keeps_its_metrics_with_the_new_time(
    mock: respx.MockRouter, client: httpx.AsyncClient, clock: FakeClock
) -> None:
    mock.get("/metrics").mock(
        side_effect=[
            httpx.Response(200, text="vllm:num_requests_waiting 1\n"),
            httpx.Response(200, text="vllm:num_requests_waiting 1\n"),
            httpx.Response(200, text="vllm:num_requests_waiting 3\n"),
        ]
    )
    scraper, pool = _scraper(client, clock)
    await scraper.scrape_once(_backend(pool))
    first = _backend(pool).metrics
    clock.now = 0.05
    assert await scraper.scrape_once(_backend(pool)) is True
    assert first == EngineMetrics(scraped_at=0.0, waiting=1)
    assert _backend(pool).metrics == EngineMetrics(scraped_at=0.05, waiting=1)
    clock.now = 0.1
    await scraper.scrape_once(_backend(pool))
    assert _backend(pool).metrics == EngineMetrics(scraped_at=0.1, waiting=3)


async def test_an_unchanged_unreadable_page_fails_every_time(
    mock: respx.MockRouter, client: httpx.AsyncClient, clock: FakeClock
) -> None:
    mock.get("/metrics").respond(200, text="vllm:num_requests_waiting {{{\n")
    scraper, pool = _scraper(client, clock)
    assert await scraper.scrape_once(_backend(pool)) is False
    assert await scraper.scrape_once(_backend(pool)) is False
    assert _backend(pool).scrape_errors == 2


@pytest.mark.parametrize(
    ("content_type", "body"),
    [
        ("text/plain; version=0.0.4", b"vllm:num_requests_waiting 2\n"),
        ("text/plain; charset=UTF-8", b"vllm:num_requests_waiting 2\n"),
        ("text/plain; charset=utf-16", "vllm:num_requests_waiting 2\n".encode("utf-16")),
    ],
)
async def test_the_page_is_decoded_by_its_declared_charset(
    mock: respx.MockRouter,
    client: httpx.AsyncClient,
    clock: FakeClock,
    content_type: str,
    body: bytes,
) -> None:
    mock.get("/metrics").respond(200, content=body, headers={"content-type": content_type})
    scraper, pool = _scraper(client, clock)
    assert await scraper.scrape_once(_backend(pool)) is True
    assert _backend(pool).metrics == EngineMetrics(scraped_at=0.0, waiting=2)
