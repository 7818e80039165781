"""Placements shared through a Redis stream: the publish loop and the apply loop.

`note` is called on the request path for every local dispatch: it appends the placement to
a bounded in-memory queue and wakes the publisher, nothing else (no I/O, no await). When the
queue is full (Redis slow or down), the oldest placements are dropped and counted: they only
make other gateways' indexes less complete.

`publish` sends the queue in batches: one pipelined round trip of XADDs per wake-up, each
with `MAXLEN ~ max_entries` so the stream stays bounded (Redis trims whole macro-nodes, so
it holds a little more). `apply` reads the stream with XREAD BLOCK from where it left off
(from the start on first connect, so a gateway that joins warms its mirror from the bounded
history), skips its own gateway's entries, and hands the others to `record` (the gateway
records them into its `PrefixIndex`). After an outage both loops reconnect with backoff
(`RedisLink.attempt`) and carry on from their last stream id; entries published while this
gateway could not read are caught up, as far as the stream still holds them.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import cast

from redis.typing import EncodableT, FieldT, KeyT, StreamIdT

from gateway.state.codec import BadEntryError, Placement, decode, encode
from gateway.state.link import RedisLink

log = logging.getLogger(__name__)

RecordPlacement = Callable[[Placement], bool]  # False: skipped (unknown backend, other size)


@dataclass(slots=True)
class PlacementCounters:
    """Totals since start, for `/admin/backends` and the metrics."""

    queued: int = 0  # local placements noted
    published: int = 0  # of those, written to the stream
    dropped: int = 0  # of those, lost to a full queue
    received: int = 0  # entries read from other gateways
    applied: int = 0  # of those, recorded into the local index
    skipped: int = 0  # of those, unusable here (unknown backend, other block size, bad entry)
    lag_ms_last: float | None = None  # dispatch elsewhere → recorded here, the last entry


class PlacementReplicator:
    """Publishes this gateway's placements and applies the other gateways' ones."""

    def __init__(
        self,
        link: RedisLink,
        stream: str,
        gateway_id: str,
        record: RecordPlacement,
        *,
        max_entries: int = 100_000,
        max_queue: int = 10_000,
        batch: int = 256,
        lag_samples: int = 4096,
    ) -> None:
        self.link = link
        self.stream = stream
        self.gateway_id = gateway_id
        self._record = record
        self._max_entries = max_entries
        self._batch = batch
        self._queue: deque[Placement] = deque()
        self._max_queue = max_queue
        self._wake = asyncio.Event()
        self._last_id = b"0-0"
        self.warmed = False  # the first read since start has caught up with the stream
        self.counters = PlacementCounters()
        # Recent (dispatch elsewhere → recorded here) lags in ms, for measurement.
        self.lags_ms: deque[float] = deque(maxlen=lag_samples)

    def note(self, backend: str, hashes: Sequence[int], block_chars: int) -> None:
        """A local dispatch (request path: no I/O)."""
        if len(self._queue) >= self._max_queue:
            self._queue.popleft()
            self.counters.dropped += 1
        at_ms = time.time_ns() // 1_000_000
        self._queue.append(Placement(self.gateway_id, backend, block_chars, tuple(hashes), at_ms))
        self.counters.queued += 1
        self._wake.set()

    async def publish(self) -> None:
        """Runs until cancelled: the queue, in pipelined batches, to the stream."""
        while True:
            if not self._queue:
                self._wake.clear()
                await self._wake.wait()
            batch = [self._queue.popleft() for _ in range(min(self._batch, len(self._queue)))]
            sent = await self.link.attempt(partial(self._xadd, batch), self._timeout())
            if sent is None:  # Redis failed it: back to the front, the oldest dropped if full
                self._queue.extendleft(reversed(batch))
                while len(self._queue) > self._max_queue:
                    self._queue.popleft()
                    self.counters.dropped += 1
                continue
            self.counters.published += len(batch)

    async def _xadd(self, batch: list[Placement]) -> bool:
        async with self.link.commands.pipeline(transaction=False) as pipe:
            for p in batch:
                fields = cast("dict[FieldT, EncodableT]", encode(p))
                pipe.xadd(self.stream, fields, maxlen=self._max_entries, approximate=True)
            await pipe.execute()
        return True

    async def apply(self) -> None:
        """Runs until cancelled: the other gateways' placements into the local index."""
        block_ms = self.link.settings.block_ms
        timeout = block_ms / 1000 + self._timeout()
        while True:
            # Catching up (history at start): no wait on an empty stream, readiness waits on it.
            block = block_ms if self.warmed else None
            xread = self.link.blocking.xread
            streams: dict[KeyT, StreamIdT] = {self.stream: self._last_id}
            read = await self.link.attempt(
                partial(xread, streams, count=self._batch, block=block), timeout
            )
            if read is None:
                continue
            entries = _entries(read)
            for entry_id, fields in entries:
                self._last_id = entry_id
                self._apply_one(fields)
            if len(entries) < self._batch:
                self.warmed = True

    def _apply_one(self, fields: dict[bytes, bytes]) -> None:
        try:
            p = decode(fields)
        except BadEntryError as exc:
            self.counters.skipped += 1
            log.debug("stream %s: %s", self.stream, exc)
            return
        if p.gateway == self.gateway_id:
            return
        c = self.counters
        c.received += 1
        if self._record(p):
            c.applied += 1
            lag = time.time_ns() / 1_000_000 - p.at_ms
            if self.warmed:  # history read at start is not lag
                c.lag_ms_last = lag
                self.lags_ms.append(lag)
        else:
            c.skipped += 1

    def _timeout(self) -> float:
        return self.link.settings.command_timeout_s


def _entries(read: object) -> list[tuple[bytes, dict[bytes, bytes]]]:
    """XREAD's answer (RESP2 list or RESP3 map of one stream) as (id, fields) pairs."""
    if not read:
        return []
    if isinstance(read, dict):
        streams = list(read.values())
        return list(streams[0][0]) if streams and streams[0] else []
    return list(read[0][1])  # type: ignore[index]
