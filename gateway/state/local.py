"""Shared state between the workers of one `kvgate serve --workers N`, without Redis.

The workers of one machine share routing state as gateways do through Redis — the same events
(`gateway.state.codec`) into the same `Mirror`, the same load reports (`gateway.state.load`) —
over their own channel (`gateway.workers.siblings`: a Unix stream socket per pair of workers):
no extra hop, nothing to run. Why not shared memory: docs/decisions/0016-workers.md.

`run` loops: connect to the siblings not connected yet, wait for an event (at most the load
interval), then send one frame with every queued event and this worker's load report if it is
due. Frames go at most every `min_gap_s`, so a busy worker sends a few hundred frames a second,
each with many events, not one frame per request. There is no history: a worker that restarts
learns from its siblings' next events, and is ready at once (`warmed`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Protocol

import msgpack  # type: ignore[import-untyped]

from gateway.state.codec import BadEntryError, decode, pack_events, unpack_events
from gateway.state.load import LoadSharing, decode_report, encode_report
from gateway.state.outbox import Outbox
from scoring.state.mirror import Mirror

log = logging.getLogger(__name__)


class SiblingLinks(Protocol):
    """What the mesh needs of the workers' channel."""

    async def connect(self) -> None: ...

    def broadcast(self, payload: bytes) -> None: ...


class LocalMesh:
    """Sends this worker's events and load to its siblings; applies theirs."""

    warmed = True

    def __init__(
        self,
        links: SiblingLinks,
        outbox: Outbox,
        mirror: Mirror,
        load: LoadSharing | None,
        *,
        batch: int = 1024,
        min_gap_s: float = 0.002,
    ) -> None:
        self._links = links
        self._outbox = outbox
        self._mirror = mirror
        self._load = load
        self._batch = batch
        self._min_gap_s = min_gap_s
        self._sent_at = 0.0
        self.frames = 0

    async def run(self) -> None:
        """Runs until cancelled."""
        wait_s = self._load.interval_s if self._load is not None else 1.0
        while True:
            await self._links.connect()
            try:
                async with asyncio.timeout(wait_s):
                    await self._outbox.wait()
            except TimeoutError:
                pass
            gap = self._sent_at + self._min_gap_s - time.monotonic()
            if gap > 0:
                await asyncio.sleep(gap)  # more events join this frame
            self.flush()

    def flush(self) -> None:
        """One frame: the queued events and the load report, if any."""
        batch = self._outbox.take(self._batch)
        report = None
        if (load := self._load) is not None:
            load.expire()
            report = load.outgoing()
        if not batch and report is None:
            return
        events = pack_events(batch) if batch else None
        self._links.broadcast(msgpack.packb([events, encode_report(report) if report else None]))
        self._outbox.sent(batch)
        self._sent_at = time.monotonic()
        self.frames += 1

    def receive(self, payload: bytes) -> None:
        """A sibling's frame."""
        counters = self._mirror.counters
        try:
            events, report = msgpack.unpackb(payload)
            if report is not None and self._load is not None:
                self._load.receive(decode_report(report))
            batch = unpack_events(events) if events is not None else []
        except (BadEntryError, ValueError, TypeError) as exc:
            counters.skipped += 1
            log.debug("a sibling's frame: %r", exc)
            return
        for fields in batch:
            try:
                self._mirror.apply(decode(fields))
            except BadEntryError as exc:
                counters.skipped += 1
                log.debug("a sibling's event: %s", exc)
