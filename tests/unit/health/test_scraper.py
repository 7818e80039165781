from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from adapters.vllm import VLLM
from health.fetch import FetchError, FetchResult
from health.pool import Backend, BackendPool, BackendSpec
from health.scraper import Scraper, ScrapeSettings
from health.state import HealthPolicy
from routing.types import EngineMetrics
from tests.unit.health.conftest import URL, FakeClock, FakeFetcher, page

METRICS = URL + "/metrics"
FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
VLLM_PAGE = (FIXTURES / "vllm-0.32" / "metrics_after.txt").read_text()
VLLM_METRICS = EngineMetrics(
    scraped_at=0.0, waiting=0, running=0, kv_usage=0.0, block_size=128, num_blocks=64
)


def _scraper(
    fetcher: FakeFetcher, clock: FakeClock, *specs: BackendSpec
) -> tuple[Scraper, BackendPool]:
    settings = ScrapeSettings()
    pool = BackendPool(
        specs or (BackendSpec(url=URL, engine="vllm"),),
        HealthPolicy(),
        clock,
        stale_after_s=settings.stale_after_s,
    )
    return Scraper(pool, fetcher, settings), pool


def _backend(pool: BackendPool) -> Backend:
    return pool.get("engine:8000")


async def test_scrape_stores_the_parsed_metrics(fetcher: FakeFetcher, clock: FakeClock) -> None:
    fetcher.script(METRICS, page(VLLM_PAGE))
    scraper, pool = _scraper(fetcher, clock)
    clock.now = 7.0
    assert await scraper.scrape_once(_backend(pool)) is True
    assert fetcher.calls == [(METRICS, 0.5)]
    expected = EngineMetrics(
        scraped_at=7.0, waiting=0, running=0, kv_usage=0.0, block_size=128, num_blocks=64
    )
    assert _backend(pool).metrics == expected
    assert pool.snapshots()[0].metrics == expected
    assert _backend(pool).scrape_errors == 0


async def test_each_scrape_replaces_the_metrics_object(
    fetcher: FakeFetcher, clock: FakeClock
) -> None:
    fetcher.script(
        METRICS, page("vllm:num_requests_waiting 1\n"), page("vllm:num_requests_waiting 5\n")
    )
    scraper, pool = _scraper(fetcher, clock)
    await scraper.scrape_once(_backend(pool))
    first = _backend(pool).metrics
    clock.now = 0.05
    await scraper.scrape_once(_backend(pool))
    assert first == EngineMetrics(scraped_at=0.0, waiting=1)  # untouched
    assert _backend(pool).metrics == EngineMetrics(scraped_at=0.05, waiting=5)


async def test_trtllm_is_scraped_on_its_prometheus_path(
    fetcher: FakeFetcher, clock: FakeClock
) -> None:
    fetcher.script(URL + "/prometheus/metrics", page("trtllm_num_requests_waiting 2\n"))
    scraper, pool = _scraper(fetcher, clock, BackendSpec(url=URL, engine="trtllm"))
    assert await scraper.scrape_once(_backend(pool)) is True
    assert fetcher.calls == [(URL + "/prometheus/metrics", 0.5)]
    assert _backend(pool).metrics == EngineMetrics(scraped_at=0.0, waiting=2)


@pytest.mark.parametrize(
    "answer",
    [
        page(VLLM_PAGE, status=500),
        page(status=404),
        page('vllm:num_requests_waiting{engine="0" 3\n'),
        page("vllm:num_requests_waiting many\n"),
        FetchError("ConnectError: refused"),
        FetchError("Timeout: no complete answer in 0.5 s"),
    ],
)
async def test_failed_scrape_counts_an_error_and_keeps_the_old_metrics(
    answer: FetchResult | FetchError,
    fetcher: FakeFetcher,
    clock: FakeClock,
) -> None:
    fetcher.script(METRICS, page(VLLM_PAGE), answer)
    scraper, pool = _scraper(fetcher, clock)
    backend = _backend(pool)
    await scraper.scrape_once(backend)
    clock.now = 0.1
    assert await scraper.scrape_once(backend) is False
    assert await scraper.scrape_once(backend) is False
    assert backend.scrape_errors == 2
    assert backend.metrics == VLLM_METRICS


async def test_failures_are_logged_on_change_only(
    fetcher: FakeFetcher,
    clock: FakeClock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    refused = FetchError("ConnectError: refused")
    fetcher.script(METRICS, refused, refused, refused, page(VLLM_PAGE))
    scraper, pool = _scraper(fetcher, clock)
    with caplog.at_level(logging.INFO, logger="health.scraper"):
        for _ in range(4):
            await scraper.scrape_once(_backend(pool))
    assert [r.getMessage() for r in caplog.records] == [
        "backend engine:8000: metrics scrape failed: ConnectError: refused",
        "backend engine:8000: metrics scrape recovered",
    ]
    assert _backend(pool).scrape_errors == 3


async def test_an_error_status_is_logged_with_the_path(
    fetcher: FakeFetcher, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    fetcher.script(METRICS, page("busy", status=503))
    scraper, pool = _scraper(fetcher, clock)
    with caplog.at_level(logging.WARNING, logger="health.scraper"):
        assert await scraper.scrape_once(_backend(pool)) is False
    assert [r.getMessage() for r in caplog.records] == [
        "backend engine:8000: metrics scrape failed: GET /metrics returned 503"
    ]


async def test_stale_metrics_are_unknown_in_snapshots(
    fetcher: FakeFetcher, clock: FakeClock
) -> None:
    fetcher.script(METRICS, page(VLLM_PAGE), FetchError("ConnectError: refused"))
    scraper, pool = _scraper(fetcher, clock)
    await scraper.scrape_once(_backend(pool))
    clock.now = 0.2  # exactly at the threshold: still fresh
    assert pool.snapshots()[0].metrics == VLLM_METRICS
    await scraper.scrape_once(_backend(pool))  # fails; the old metrics age on
    clock.now = 0.25
    assert pool.snapshots()[0].metrics is None
    assert _backend(pool).metrics == VLLM_METRICS  # kept, only hidden from scheduling


async def test_openai_backends_are_not_polled(fetcher: FakeFetcher, clock: FakeClock) -> None:
    fetcher.script(METRICS, page(VLLM_PAGE))
    scraper, pool = _scraper(
        fetcher,
        clock,
        BackendSpec(url=URL, engine="openai"),
        BackendSpec(url="http://other:9000", engine="vllm"),
    )
    assert [b.id for b in scraper.polled()] == ["other:9000"]
    assert await scraper.scrape_once(_backend(pool)) is False
    assert fetcher.calls == []
    assert _backend(pool).metrics is None
    assert _backend(pool).scrape_errors == 0


async def test_unknown_engine_is_rejected(fetcher: FakeFetcher, clock: FakeClock) -> None:
    with pytest.raises(ValueError, match="backend engine:8000: no adapter for engine 'tgi'"):
        _scraper(fetcher, clock, BackendSpec(url=URL, engine="tgi"))


async def test_a_page_without_the_engines_metrics_is_reported_once(
    fetcher: FakeFetcher,
    clock: FakeClock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    fetcher.script(METRICS, page(VLLM_PAGE))
    scraper, pool = _scraper(fetcher, clock, BackendSpec(url=URL, engine="sglang"))
    with caplog.at_level(logging.WARNING, logger="health.scraper"):
        await scraper.scrape_once(_backend(pool))
        await scraper.scrape_once(_backend(pool))
    assert [r.getMessage() for r in caplog.records] == [
        "backend engine:8000: no sglang metrics at /metrics (the page looks like vllm)"
    ]
    assert _backend(pool).metrics == EngineMetrics(scraped_at=0.0)  # fresh, all unknown


async def test_run_polls_until_cancelled(fetcher: FakeFetcher, clock: FakeClock) -> None:
    three_scrapes = asyncio.Event()

    def answer() -> FetchResult:
        if fetcher.count(METRICS) >= 3:
            three_scrapes.set()
        return page(VLLM_PAGE)

    fetcher.script(METRICS, answer)
    pool = BackendPool((BackendSpec(url=URL, engine="vllm"),), HealthPolicy(), clock)
    # interval 0: the loop only yields between scrapes, it never really sleeps.
    scraper = Scraper(pool, fetcher, ScrapeSettings(interval_s=0.0))
    task = asyncio.create_task(scraper.run())
    await asyncio.wait_for(three_scrapes.wait(), 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert _backend(pool).metrics == VLLM_METRICS


async def test_run_polls_only_backends_that_export_metrics_added_or_not(
    fetcher: FakeFetcher, clock: FakeClock
) -> None:
    scraper, pool = _scraper(fetcher, clock, BackendSpec(url=URL, engine="openai"))
    task = asyncio.create_task(scraper.run())
    await asyncio.sleep(0.01)
    assert fetcher.calls == []  # the openai backend is never polled
    other = "http://other:9000"
    fetcher.script(other + "/metrics", page(""))
    pool.add(BackendSpec(url=other, engine="vllm"))  # discovered at runtime
    for _ in range(100):
        await asyncio.sleep(0.001)
        if fetcher.count(other + "/metrics"):
            break
    assert fetcher.count(other + "/metrics") >= 1
    pool.remove("other:9000")
    await asyncio.sleep(0.01)
    calls = fetcher.count(other + "/metrics")
    await asyncio.sleep(0.1)  # longer than the 50 ms interval: no scrape once removed
    assert fetcher.count(other + "/metrics") == calls
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


def test_without_a_threshold_metrics_never_go_stale(clock: FakeClock) -> None:
    pool = BackendPool((BackendSpec(url=URL, engine="vllm"),), HealthPolicy(), clock)
    _backend(pool).metrics = VLLM_METRICS
    clock.now = 1e6
    assert pool.snapshots()[0].metrics == VLLM_METRICS
    assert _backend(pool).snapshot(clock.now, stale_after_s=0.2).metrics is None


async def test_an_unchanged_page_keeps_its_metrics_with_the_new_time(
    fetcher: FakeFetcher, clock: FakeClock
) -> None:
    fetcher.script(
        METRICS,
        page("vllm:num_requests_waiting 1\n"),
        page("vllm:num_requests_waiting 1\n"),
        page("vllm:num_requests_waiting 3\n"),
    )
    scraper, pool = _scraper(fetcher, clock)
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
    fetcher: FakeFetcher, clock: FakeClock
) -> None:
    fetcher.script(METRICS, page("vllm:num_requests_waiting {{{\n"))
    scraper, pool = _scraper(fetcher, clock)
    assert await scraper.scrape_once(_backend(pool)) is False
    assert await scraper.scrape_once(_backend(pool)) is False
    assert _backend(pool).scrape_errors == 2


@pytest.mark.parametrize(
    ("content_type", "body"),
    [
        ("text/plain; version=0.0.4", b"vllm:num_requests_waiting 2\n"),
        ("text/plain; charset=UTF-8", b"vllm:num_requests_waiting 2\n"),
        ("text/plain; charset=utf-16", "vllm:num_requests_waiting 2\n".encode("utf-16")),
        ('text/plain; Charset="UTF-16"', "vllm:num_requests_waiting 2\n".encode("utf-16")),
        ("text/plain; charset=no-such-codec", b"vllm:num_requests_waiting 2\n"),  # as UTF-8
    ],
)
async def test_the_page_is_decoded_by_its_declared_charset(
    fetcher: FakeFetcher,
    clock: FakeClock,
    content_type: str,
    body: bytes,
) -> None:
    fetcher.script(METRICS, page(body, content_type=content_type))
    scraper, pool = _scraper(fetcher, clock)
    assert await scraper.scrape_once(_backend(pool)) is True
    assert _backend(pool).metrics == EngineMetrics(scraped_at=0.0, waiting=2)


# Issue 15, defect 1: two series of 1e308 (their sum overflows) made the vLLM adapter raise
# OverflowError, which the scraper did not catch: every loop of the pool stopped with it.
OVERFLOWING_PAGE = (
    'vllm:num_requests_waiting{e="0"} 1e308\nvllm:num_requests_waiting{e="1"} 1e308\n'
)


class _BrokenAdapter:
    """An adapter with a bug some page triggers: parsing raises something unexpected."""

    engine = "broken"
    metrics_path = "/metrics"

    def parse_metrics(self, text: str, scraped_at: float) -> EngineMetrics:
        raise ZeroDivisionError("a bug in the adapter")


async def test_an_overflowing_page_is_read_not_raised(
    fetcher: FakeFetcher, clock: FakeClock
) -> None:
    fetcher.script(METRICS, page(OVERFLOWING_PAGE))
    scraper, pool = _scraper(fetcher, clock)
    assert await scraper.scrape_once(_backend(pool)) is True
    assert _backend(pool).metrics == EngineMetrics(scraped_at=0.0)


async def test_any_error_of_a_scrape_is_that_backends_scrape_error(
    fetcher: FakeFetcher, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    fetcher.script(METRICS, page(VLLM_PAGE), RuntimeError("odd"))
    scraper, pool = _scraper(fetcher, clock)
    assert await scraper.scrape_once(_backend(pool)) is True
    for _ in range(50):  # a failing backend is logged once, not once per scrape
        assert await scraper.scrape_once(_backend(pool)) is False
    assert _backend(pool).scrape_errors == 50
    assert _backend(pool).metrics == VLLM_METRICS  # the old metrics stay (and go stale)
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert [r.getMessage() for r in warnings] == [
        "backend engine:8000: metrics scrape failed: RuntimeError: odd"
    ]
    assert not warnings[0].exc_info  # no traceback per scrape
    clock.now = 61.0  # a minute later, one reminder with the count held back
    await scraper.scrape_once(_backend(pool))
    assert "(49 more since the last report)" in caplog.records[-1].getMessage()


async def test_one_backends_broken_page_does_not_stop_the_others(
    fetcher: FakeFetcher, clock: FakeClock
) -> None:
    good, bad = "http://good:8000", "http://bad:8000"
    fetcher.script(good + "/metrics", page(VLLM_PAGE))
    fetcher.script(bad + "/metrics", page(OVERFLOWING_PAGE))
    specs = (BackendSpec(url=good, engine="vllm"), BackendSpec(url=bad, engine="broken"))
    pool = BackendPool(specs, HealthPolicy(), clock)
    adapters = {"vllm": VLLM, "broken": _BrokenAdapter()}
    scraper = Scraper(pool, fetcher, ScrapeSettings(interval_s=0.0), adapters=adapters)
    task = asyncio.create_task(scraper.run())
    for _ in range(1000):
        await asyncio.sleep(0)
        if fetcher.count(good + "/metrics") >= 20 and fetcher.count(bad + "/metrics") >= 20:
            break
    assert not task.done()  # the scraper still runs ...
    assert fetcher.count(good + "/metrics") >= 20  # ... and polls the good backend
    assert pool.get("bad:8000").scrape_errors >= 19
    assert pool.get("good:8000").metrics is not None
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_scrapes_ask_the_fetcher_for_at_most_max_bytes(
    fetcher: FakeFetcher, clock: FakeClock
) -> None:
    fetcher.script(METRICS, page(VLLM_PAGE))
    pool = BackendPool((BackendSpec(url=URL, engine="vllm"),), HealthPolicy(), clock)
    scraper = Scraper(pool, fetcher, ScrapeSettings(max_bytes=1234))
    await scraper.scrape_once(_backend(pool))
    assert fetcher.max_bytes == 1234
