"""What the gateways read of the simulated replicas: their scrapes and the snapshots they route on.

A gateway scrapes each replica every `scrape_interval_s`, from a phase of its own; metrics older
than `stale_after_s` are unknown (None), as the gateway's health pool treats them; `oracle`
reads every replica as it is now. A replica's KV capacity is known from its first scrape on.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Protocol

from routing.types import EndpointSnapshot, EngineMetrics, metrics_fresh
from sim.replay.gateways import SimGateway

TIDY_EVERY = 64  # decisions between drops of the replicas' history older than any scrape


class Scraped(Protocol):
    """What a gateway scrapes: a `Scraped`, or a data-parallel engine's combined page."""

    @property
    def id(self) -> str: ...

    @property
    def scrape_phase_s(self) -> float: ...

    def metrics_at(self, s: float) -> EngineMetrics: ...

    def forget_before(self, s: float) -> None: ...

    def kv_tokens(self) -> int | None: ...


class Scrapes:
    """The replicas as the gateways' scrapes see them (see the module docstring)."""

    __slots__ = ("_decisions", "_interval", "_oracle", "_position", "_replicas", "_stale_after")

    def __init__(
        self,
        replicas: Sequence[Scraped],
        interval_s: float,
        stale_after_s: float,
        *,
        oracle: bool,
    ) -> None:
        self._replicas = replicas
        self._position = {r.id: i for i, r in enumerate(replicas)}
        self._interval = interval_s
        self._stale_after = stale_after_s
        self._oracle = oracle
        self._decisions = 0

    def last_scrape(self, replica: Scraped, now: float) -> float | None:
        """When the gateway last scraped `replica` by `now` (None: not yet)."""
        phase = replica.scrape_phase_s
        if now < phase:
            return None
        return phase + math.floor((now - phase) / self._interval) * self._interval

    def kv_tokens(self, replica_id: str, at: float) -> int | None:
        """A replica's KV capacity in tokens as the gateways know it at `at` (None: not
        scraped by then)."""
        replica = self._replicas[self._position[replica_id]]
        if at < replica.scrape_phase_s:
            return None
        return replica.kv_tokens()

    def scraped(self, now: float) -> list[EngineMetrics | None]:
        """Each replica's metrics as last scraped, however old."""
        out: list[EngineMetrics | None] = []
        for replica in self._replicas:
            scraped = self.last_scrape(replica, now)
            out.append(None if scraped is None else replica.metrics_at(scraped))
        return out

    def snapshots(self, model: str, gateway: SimGateway, now: float) -> list[EndpointSnapshot]:
        """Every replica as `gateway`'s scheduler sees it at `now`, serving `model`."""
        models = frozenset((model,))
        stale_after = self._stale_after
        self._decisions += 1
        tidy = self._decisions % TIDY_EVERY == 0
        out = []
        show = gateway.snapshot
        for position, replica in enumerate(self._replicas):
            scraped = self.last_scrape(replica, now)
            if self._oracle:
                metrics = replica.metrics_at(now)
            elif scraped is None or not metrics_fresh(scraped, now, stale_after):
                metrics = None
            else:
                metrics = replica.metrics_at(scraped)
            if tidy and scraped is not None:
                replica.forget_before(scraped)
            out.append(show(position, metrics, models))
        return out
