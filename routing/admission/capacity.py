"""Whether the fleet takes more requests now (`room`, `took`), and its places when idle (`size`).

Two sources, as configured (`admission.max_in_flight_per_backend`):
- `InFlightCap` (a cap set): room = healthy backends × cap − requests admitted and not yet
  finished − the other gateways' requests in flight on the healthy backends
  (`remote_in_flight`, 0 without shared state). Admissions are counted at the grant, so a
  burst cannot overshoot. No healthy backend: room is unbounded (the router answers 503 now).
  Size: healthy backends × cap.
- `SaturationBudget` (no cap): a healthy backend past the `saturation-filter`'s thresholds
  (`queue_threshold` waiting, `kv_threshold` KV usage) has no room, one below has room for
  `floor(queue_threshold) + 1 − waiting`. The sum is a budget per scrape: grants spend it, it
  is recomputed only when some backend's metrics are newer (no burst admitted whole on one
  stale page), and each finished request gives one back, up to the page's budget. A backend
  without metrics counts as idle; if none reports any, room is unbounded (None). Size:
  healthy backends × (floor(queue_threshold) + 1).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Protocol

from routing.types import EndpointSnapshot


class Capacity(Protocol):
    """How many more requests the fleet takes now (None: no limit)."""

    def room(self, endpoints: Sequence[EndpointSnapshot], admitted: int) -> int | None: ...

    def size(self, endpoints: Sequence[EndpointSnapshot]) -> int: ...

    def took(self) -> None: ...

    def gave_back(self) -> None: ...


class InFlightCap:
    """At most `max_per_backend` admitted requests per healthy backend."""

    def __init__(self, max_per_backend: int) -> None:
        self.max_per_backend = max_per_backend

    def room(self, endpoints: Sequence[EndpointSnapshot], admitted: int) -> int | None:
        healthy = [e for e in endpoints if e.healthy]
        if not healthy:
            return None  # the router answers 503 at once; a wait in the queue only delays it
        elsewhere = sum(e.remote_in_flight for e in healthy)
        return max(0, len(healthy) * self.max_per_backend - admitted - elsewhere)

    def size(self, endpoints: Sequence[EndpointSnapshot]) -> int:
        return _healthy_count(endpoints) * self.max_per_backend

    def took(self) -> None:
        pass  # `admitted` counts it

    def gave_back(self) -> None:
        pass  # `admitted` counts it


class SaturationBudget:
    """Room from the engines' scraped queue length and KV usage (formula in the module doc)."""

    def __init__(self, queue_threshold: float, kv_threshold: float) -> None:
        self.queue_threshold = queue_threshold
        self.kv_threshold = kv_threshold
        self._stamp: tuple[tuple[str, float], ...] = ()
        self._budget = 0
        self._page_budget = 0

    def room(self, endpoints: Sequence[EndpointSnapshot], admitted: int) -> int | None:
        # One loop, not two comprehensions (a function object each): this runs per request.
        healthy, scraped = [], []
        for e in endpoints:
            if e.healthy:
                healthy.append(e)
                if (m := e.metrics) is not None:
                    scraped.append((e.id, m.scraped_at))
        stamp = tuple(scraped)
        if not stamp:
            return None
        if stamp != self._stamp:
            self._stamp = stamp
            self._budget = self._page_budget = sum(self._headroom(e) for e in healthy)
        return max(0, self._budget)

    def size(self, endpoints: Sequence[EndpointSnapshot]) -> int:
        return _healthy_count(endpoints) * (math.floor(self.queue_threshold) + 1)

    def took(self) -> None:
        self._budget -= 1

    def gave_back(self) -> None:
        self._budget = min(self._budget + 1, self._page_budget)

    def _headroom(self, endpoint: EndpointSnapshot) -> int:
        most = math.floor(self.queue_threshold) + 1
        m = endpoint.metrics
        if m is None:
            return most
        if m.kv_usage is not None and m.kv_usage > self.kv_threshold:
            return 0
        return max(0, most - (m.waiting or 0))


def _healthy_count(endpoints: Sequence[EndpointSnapshot]) -> int:
    n = 0
    for e in endpoints:  # a loop, not a generator: no function object per call
        if e.healthy:
            n += 1
    return n
