"""This gateway's shared-state events waiting to be sent: no I/O on the request path.

`put` appends an event to a bounded queue and wakes the sender; `add_ttft` adds a TTFT point
to a batch that goes out as one `TtftPoints` event with the next `take`; `poke` wakes the
sender with no event (this gateway's load changed: its report should go now). When the queue is
full (the channel slow or down) the oldest events are dropped and counted: they only make
the other gateways' mirrors less complete. A sender `take`s a batch, sends it, and on failure
`put_back`s it at the front, so nothing is reordered.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque

from scoring.state.events import Event, EventCounters, TtftPoints


class Outbox:
    """Bounded FIFO of local events, with the TTFT points batched."""

    def __init__(self, gateway_id: str, counters: EventCounters, max_queue: int = 10_000) -> None:
        self.gateway_id = gateway_id
        self.counters = counters
        self._queue: deque[Event] = deque()
        self._ttft: list[tuple[str, float, float]] = []
        self._max = max_queue
        self._wake = asyncio.Event()
        self._poked = False

    def __len__(self) -> int:
        return len(self._queue) + (1 if self._ttft else 0)

    def put(self, event: Event) -> None:
        if len(self._queue) >= self._max:
            self._queue.popleft()
            self.counters.dropped += 1
        self._queue.append(event)
        self.counters.queued += 1
        self._wake.set()

    def add_ttft(self, backend: str, work_tokens: float, ttft_s: float) -> None:
        if len(self._ttft) >= self._max:
            return  # a later batch teaches the same lines
        self._ttft.append((backend, work_tokens, ttft_s))
        self._wake.set()

    def poke(self) -> None:
        self._poked = True
        self._wake.set()

    async def wait(self) -> None:
        """Until something is queued, or `poke`."""
        if not len(self) and not self._poked:
            self._wake.clear()
            await self._wake.wait()

    def take(self, n: int) -> list[Event]:
        """Up to `n` events, oldest first; the pending TTFT points as one more."""
        self._poked = False
        batch = [self._queue.popleft() for _ in range(min(n, len(self._queue)))]
        if self._ttft:
            points, self._ttft = tuple(self._ttft), []
            batch.append(TtftPoints(self.gateway_id, points, now_ms()))
            self.counters.queued += 1
        return batch

    def put_back(self, batch: list[Event]) -> None:
        """A batch that could not be sent, back at the front; the oldest dropped if full."""
        self._queue.extendleft(reversed(batch))
        while len(self._queue) > self._max:
            self._queue.popleft()
            self.counters.dropped += 1

    def sent(self, batch: list[Event]) -> None:
        self.counters.published += len(batch)


def now_ms() -> float:
    """Wall clock in ms (to the µs): events carry it to measure the lag between gateways."""
    return time.time_ns() // 1000 / 1000
