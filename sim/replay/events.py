"""The event heap of the discrete-event simulator: virtual time, then priority, then order.

At equal times, a step's end (its tokens reach the gateway) comes before a batch of KV-cache
events reaching the precise index, then another gateway's state change reaching the rest
(`sim.replay.sharing`), all before an arrival (which is routed with what the gateways know
by then), and an arrival (at the gateway, a P/D prefill's answer there, then at the engine,
past its API server's queue, or a P/D transfer's end) before the engine starts its next step,
so a request reaching the engine exactly at a step boundary joins the step that starts then.
"""

from __future__ import annotations

import heapq
from enum import IntEnum


class Kind(IntEnum):
    STEP_END = 0
    KV_EVENTS = 1
    SYNC = 2
    ARRIVAL = 3
    HANDOFF = 4
    ENGINE_ARRIVAL = 5
    TRANSFER_END = 6
    STEP_START = 7
    SAMPLE = 8


class EventQueue:
    """Events as (time, kind, sequence, subject, token); pop the earliest."""

    __slots__ = ("_heap", "_seq")

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, int, int, int]] = []
        self._seq = 0

    def push(self, time: float, kind: Kind, subject: int = 0, token: int = 0) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (time, kind, self._seq, subject, token))

    def pop(self) -> tuple[float, int, int, int]:
        """(time, kind, subject, token) of the earliest event (kind: a `Kind` value)."""
        time, kind, _, subject, token = heapq.heappop(self._heap)
        return time, kind, subject, token

    def __bool__(self) -> bool:
        return bool(self._heap)

    def __len__(self) -> int:
        return len(self._heap)
