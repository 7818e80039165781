"""A shared-state sink that records what the cache ledger tells it, in order."""

from __future__ import annotations

from typing import Any

from routing.types import RoutingRequest


class RecordingSink:
    """The shared state's hooks, recorded (`gateway.cache_ledger.StateSink`)."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def placed(self, backend_id: str, request: RoutingRequest, uncached_tokens: int) -> None:
        self.calls.append(("placed", backend_id))

    def withdrawn(self, backend_id: str, request: RoutingRequest, start: int) -> None:
        self.calls.append(("withdrawn", backend_id))

    def evicted(self, backend_id: str, request: RoutingRequest, weight: int) -> None:
        self.calls.append(("evicted", backend_id))

    def forgotten(self, backend_id: str) -> None:
        self.calls.append(("forgotten", backend_id))

    def ttft(self, backend_id: str, work_tokens: float, ttft_s: float) -> None:
        self.calls.append(("ttft", backend_id, ttft_s))

    def load_changed(self) -> None:
        self.calls.append(("load_changed",))
