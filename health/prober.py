"""Active health probes and model discovery: one polling loop per backend.

Each loop sends `GET /health` every `interval_s` (timeout `timeout_s`) and refreshes the
backend's served models from `GET /v1/models` every `model_refresh_s`. Results go into the
backend's `HealthState` (a data-parallel engine's ranks share it; an SGLang engine's ranks
are read from its `/server_info` `dp_size`); nothing here decides routing. Any error of one
backend's probe (an unreachable or odd backend, or a bug its answer triggers) is a failed
probe of that backend, and one of its model listing a failed refresh: logged, never raised.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from health.fetch import Fetcher, FetchError
from health.log_limit import LogLimit, describe
from health.per_backend import run_per_backend
from health.pool import Backend, BackendPool
from routing.types import Health

log = logging.getLogger(__name__)
SERVER_INFO = ("/server_info", "/get_server_info")  # SGLang's, newest first


@dataclass(frozen=True, slots=True)
class ProbeSettings:
    interval_s: float = 5.0
    timeout_s: float = 2.0
    model_refresh_s: float = 30.0
    max_bytes: int | None = 4 * 1024 * 1024  # longest answer read (a longer one fails)


class Prober:
    """Probes every backend of a pool through `fetcher` (kept apart from traffic)."""

    def __init__(
        self,
        pool: BackendPool,
        fetcher: Fetcher,
        settings: ProbeSettings,
        on_down: Callable[[str], None] | None = None,
    ):
        self._pool = pool
        self._fetcher = fetcher
        self.settings = settings  # replaceable while running (a config reload)
        self._on_down = on_down  # told when a backend turns unhealthy (its cache may be gone)
        self._discovery_errors = LogLimit(log, pool.now)
        self._ranks_read: set[str] = set()  # SGLang members whose server info was read

    async def initial_round(self) -> None:
        """Probe and discover every backend once, concurrently (used at start-up)."""
        async with asyncio.TaskGroup() as tg:
            for backend in self._pool.engines():
                tg.create_task(self._probe_and_discover(backend))

    async def run(self) -> None:
        """Poll forever, following the pool's membership; cancel to stop."""
        await run_per_backend(self._pool, self._loop)

    async def _loop(self, backend: Backend) -> None:
        try:
            if backend.state.health(self._pool.now()) is Health.UNKNOWN:
                await self._probe_and_discover(backend)  # added at runtime: probe at once
            while True:
                await asyncio.sleep(self.settings.interval_s)
                await self._probe_and_discover(backend)
        finally:  # the backend left the pool (or shutdown)
            self._discovery_errors.clear(backend.id)
            self._ranks_read.discard(backend.id)

    async def _probe_and_discover(self, backend: Backend) -> None:
        ok = await self.probe(backend)
        last = backend.discovered_at
        due = last is None or self._pool.now() - last >= self.settings.model_refresh_s
        if ok and due and not backend.spec.models:
            await self.discover_models(backend)
        if ok and backend.spec.engine == "sglang" and backend.spec.dp_size is None:
            await self.discover_ranks(backend)

    async def discover_ranks(self, backend: Backend) -> None:
        """An SGLang engine's data-parallel size, from its `/server_info` (`dp_size`; older
        servers: `/get_server_info`), read until it answers; over 1 makes it ranks."""
        if backend.ranks or backend.id in self._ranks_read:
            return
        for path in SERVER_INFO:
            try:
                answer = await self._fetcher.get(
                    backend.spec.url + path, self.settings.timeout_s, self.settings.max_bytes
                )
                info = orjson.loads(answer.body) if answer.ok else None
            except Exception:  # no such endpoint, or no JSON: try the other, else next round
                continue
            if isinstance(info, dict):
                self._ranks_read.add(backend.id)
                dp_size = info.get("dp_size")
                if isinstance(dp_size, int) and self._pool.set_ranks(backend.id, dp_size):
                    log.info(
                        "backend %s: %d data-parallel ranks (server info)", backend.id, dp_size
                    )
                return

    async def probe(self, backend: Backend) -> bool:
        error: str | None = None
        settings = self.settings
        try:
            url = backend.spec.url + "/health"
            answer = await self._fetcher.get(url, settings.timeout_s, settings.max_bytes)
            ok = answer.status == 200
            if not ok:
                error = f"health probe returned {answer.status}"
        except Exception as exc:  # this backend's failure only (CancelledError passes)
            ok, error = False, f"health probe failed: {describe(exc, (FetchError,))}"
        before = backend.state.health(self._pool.now())
        backend.state.record_probe(ok, self._pool.now(), error)
        after = backend.state.health(self._pool.now())
        if before is not after:
            log.info("backend %s: %s -> %s (%s)", backend.id, before.value, after.value, error)
            if after is Health.UNHEALTHY and self._on_down is not None:
                for target in backend.targets():
                    self._on_down(target.id)
        return ok

    async def discover_models(self, backend: Backend) -> None:
        url = backend.spec.url + "/v1/models"
        settings = self.settings
        try:
            answer = await self._fetcher.get(url, settings.timeout_s, settings.max_bytes)
            if not answer.ok:
                raise ValueError(f"{url} returned {answer.status}")
            cards = parse_model_list(answer.body)
        except Exception as exc:  # this backend's failure only (CancelledError passes)
            reason = describe(exc, (FetchError, ValueError))
            self._discovery_errors.warn(
                backend.id, "backend %s: model discovery failed: %s", backend.id, reason
            )
            return
        self._discovery_errors.clear(backend.id)
        if set(cards) != set(backend.model_cards):
            log.info("backend %s serves %s", backend.id, sorted(cards))
        backend.model_cards = cards
        backend.discovered_at = self._pool.now()


def parse_model_list(body: bytes) -> dict[str, Mapping[str, Any]]:
    """Parse an OpenAI `GET /v1/models` answer into model cards keyed by id."""
    data = orjson.loads(body)
    if not isinstance(data, dict) or not isinstance(data.get("data"), list):
        raise ValueError("models response has no 'data' list")
    cards: dict[str, Mapping[str, Any]] = {}
    for card in data["data"]:
        if isinstance(card, dict) and isinstance(card.get("id"), str):
            cards[card["id"]] = card
    return cards
