"""Engine metric scraping: one polling loop per backend that exports metrics.

Each loop sends `GET {url}{adapter.metrics_path}` every `interval_s` (timeout `timeout_s`),
the adapter chosen by the backend's engine, and stores the parsed, immutable `EngineMetrics`
on the backend (a data-parallel engine's ranks each get their own). Snapshots stop showing
metrics older than `stale_after_s` (GIE's 200 ms), so a backend whose scrapes keep failing
looks "unknown" to the scorers, not idle. Engines that export no metrics are not polled.

Any failure of one backend's scrape (no answer, a page over `max_bytes`, a page the adapter
cannot read, a bug the page triggers) leaves its old metrics, counts one `scrape_errors`, is
logged once and then at most once a minute while it lasts, and never stops the loop. A page
byte-identical to the previous one is not parsed again (adapters are pure functions of the
page): its metrics are the previous ones, stamped with the new `scraped_at`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from adapters.base import EngineAdapter
from adapters.registry import ADAPTERS, detect_engine
from health.fetch import Fetcher, FetchError, FetchResult
from health.log_limit import LogLimit, describe
from health.per_backend import run_per_backend
from health.pool import Backend, BackendPool
from routing.types import EngineMetrics

log = logging.getLogger(__name__)
_UTF8 = ("utf-8", "utf8")


@dataclass(frozen=True, slots=True)
class ScrapeSettings:
    interval_s: float = 0.05
    timeout_s: float = 0.5
    stale_after_s: float = 0.2  # for BackendPool(stale_after_s=...), which applies it
    max_bytes: int | None = 4 * 1024 * 1024  # larger pages are scrape errors


class Scraper:
    """Scrapes every backend of a pool through `fetcher` (kept apart from traffic).

    `clock` stamps `scraped_at`; it defaults to the pool's clock, which the staleness check
    also reads, so both must agree.
    """

    def __init__(
        self,
        pool: BackendPool,
        fetcher: Fetcher,
        settings: ScrapeSettings,
        clock: Callable[[], float] | None = None,
        adapters: Mapping[str, EngineAdapter] = ADAPTERS,
    ) -> None:
        self._pool = pool
        self._fetcher = fetcher
        self.settings = settings  # replaceable while running (a config reload)
        self._clock = clock or pool.now
        self._adapters = adapters
        for backend in pool.engines():
            engine = backend.spec.engine
            if engine not in adapters:
                raise ValueError(f"backend {backend.id}: no adapter for engine {engine!r}")
        self._errors = LogLimit(log, self._clock)  # ids whose last scrape failed
        self._warned_empty: set[str] = set()
        # id -> (page bytes, the metrics parsed from it), for skipping unchanged pages
        self._last_page: dict[str, tuple[bytes, EngineMetrics, list[EngineMetrics]]] = {}

    def polled(self) -> list[Backend]:
        """The backends that export metrics, in pool order."""
        return [b for b in self._pool.engines() if self._exports_metrics(b)]

    def _exports_metrics(self, backend: Backend) -> bool:
        adapter = self._adapters.get(backend.spec.engine)
        return adapter is not None and adapter.metrics_path is not None

    async def run(self) -> None:
        """Poll forever, following the pool's membership; cancel to stop. Backends whose
        engine exports no metrics are not polled."""
        await run_per_backend(self._pool, self._loop, self._exports_metrics)

    async def _loop(self, backend: Backend) -> None:
        loop = asyncio.get_running_loop()
        try:
            while True:
                started = loop.time()
                await self.scrape_once(backend)
                # Keep the period near interval_s however long the scrape took.
                await asyncio.sleep(max(0.0, self.settings.interval_s - (loop.time() - started)))
        finally:  # the backend left the pool (or shutdown): drop what was kept for it
            self._last_page.pop(backend.id, None)
            self._errors.clear(backend.id)

    async def scrape_once(self, backend: Backend) -> bool:
        """Scrape `backend` once; True if fresh metrics were stored."""
        adapter = self._adapters.get(backend.spec.engine)
        if adapter is None or adapter.metrics_path is None:
            return False
        # Stamped before the request: the engine rendered its page at some point after
        # this, so the metrics are never taken as fresher than they are.
        scraped_at = self._clock()
        path = adapter.metrics_path
        settings = self.settings
        try:
            answer = await self._fetcher.get(
                backend.spec.url + path, settings.timeout_s, settings.max_bytes
            )
            if not answer.ok:
                raise ValueError(f"GET {path} returned {answer.status}")
            metrics = self._parse(backend, adapter, answer, scraped_at)
        except Exception as exc:  # this backend's failure only (CancelledError passes)
            backend.scrape_errors += 1
            self._errors.warn(
                backend.id,
                "backend %s: metrics scrape failed: %s",
                backend.id,
                describe(exc, (FetchError, ValueError)),
            )
            return False
        if self._errors.clear(backend.id):
            log.info("backend %s: metrics scrape recovered", backend.id)
        backend.metrics = metrics[0]
        for rank, rank_metrics in zip(backend.ranks, metrics[1], strict=False):
            rank.metrics = rank_metrics
        return True

    def _parse(
        self, backend: Backend, adapter: EngineAdapter, answer: FetchResult, scraped_at: float
    ) -> tuple[EngineMetrics, list[EngineMetrics]]:
        """The engine's metrics, and each of its ranks' (a data-parallel engine's ranks, found
        here when the page shows several and the spec sets no `dp_size`)."""
        page = answer.body
        last = self._last_page.get(backend.id)
        if last is not None and last[0] == page and len(last[2]) == len(backend.ranks):
            at = scraped_at
            return dataclasses.replace(last[1], scraped_at=at), [
                dataclasses.replace(m, scraped_at=at) for m in last[2]
            ]
        text = _text(answer)
        metrics = adapter.parse_metrics(text, scraped_at)
        if metrics == EngineMetrics(scraped_at=scraped_at):
            self._warn_empty(backend, adapter, text)
        if not backend.ranks and backend.spec.dp_size is None:
            dp_size = adapter.dp_size_of(text)
            if dp_size > 1 and self._pool.set_ranks(backend.id, dp_size) is not None:
                log.info("backend %s: %d data-parallel ranks, routed to apart", backend.id, dp_size)
        ranks = adapter.rank_metrics(text, scraped_at, len(backend.ranks)) if backend.ranks else []
        self._last_page[backend.id] = (page, metrics, ranks)
        return metrics, ranks

    def _warn_empty(self, backend: Backend, adapter: EngineAdapter, text: str) -> None:
        """Once per backend: its page had none of its engine's metrics (wrong engine set?)."""
        if backend.id in self._warned_empty:
            return
        self._warned_empty.add(backend.id)
        log.warning(
            "backend %s: no %s metrics at %s (the page looks like %s)",
            backend.id,
            adapter.engine,
            adapter.metrics_path,
            detect_engine(text),
        )


def _text(answer: FetchResult) -> str:
    """The page decoded by the charset its Content-Type declares; UTF-8 if it declares none
    or one Python does not know (Prometheus pages are UTF-8)."""
    charset = _charset(answer.content_type)
    if charset is not None and charset not in _UTF8:
        try:
            return answer.body.decode(charset, errors="replace")
        except LookupError:
            pass
    return answer.body.decode("utf-8", errors="replace")


def _charset(content_type: str) -> str | None:
    if "charset" not in content_type.lower():
        return None
    for param in content_type.split(";")[1:]:
        name, _, value = param.partition("=")
        if name.strip().lower() == "charset":
            return value.strip().strip("\"'").lower() or None
    return None
