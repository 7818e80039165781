"""Shared-state events through a Redis stream: the publish loop and the apply loop.

`publish` sends the `Outbox` in batches: one pipelined round trip of XADDs per wake-up, each
with `MAXLEN ~ max_entries` so the stream stays bounded (Redis trims whole macro-nodes, so
it holds a little more), and this gateway's load report if it changed (`gateway.state.pubsub`
sends it otherwise), so counts that change with a dispatch go out with its placement.
`apply` reads the stream with XREAD BLOCK from where it left off (from the start on first
connect, so a gateway that joins warms its mirror from the bounded history), and hands every
entry to the `Mirror` (which skips this gateway's own). After an outage both loops reconnect
with backoff (`RedisLink.attempt`) and carry on from their last stream id; entries published
while this gateway could not read are caught up, as far as the stream still holds them.
The stream's order is every gateway's order: a `Forget` read from history is followed by the
placements made after it.
"""

from __future__ import annotations

import logging
from functools import partial
from typing import cast

from redis.typing import EncodableT, FieldT, KeyT, StreamIdT

from gateway.state.codec import BadEntryError, Event, decode, encode
from gateway.state.link import RedisLink
from gateway.state.load import LoadSharing, encode_report
from gateway.state.mirror import Mirror
from gateway.state.outbox import Outbox

log = logging.getLogger(__name__)


class EventStream:
    """Publishes this gateway's events and applies the other gateways' ones."""

    def __init__(
        self,
        link: RedisLink,
        stream: str,
        outbox: Outbox,
        mirror: Mirror,
        *,
        max_entries: int = 100_000,
        batch: int = 256,
        load: tuple[LoadSharing, str] | None = None,
    ) -> None:
        self.link = link
        self.stream = stream
        self._outbox = outbox
        self._mirror = mirror
        self._max_entries = max_entries
        self._batch = batch
        self._load = load  # this gateway's load reports and their channel: sent along
        self._last_id = b"0-0"
        self.warmed = False  # the first read since start has caught up with the stream

    async def publish(self) -> None:
        """Runs until cancelled: the outbox, in pipelined batches, to the stream."""
        outbox = self._outbox
        while True:
            await outbox.wait()
            batch = outbox.take(self._batch)
            sent = await self.link.attempt(partial(self._xadd, batch), self._timeout())
            if sent is None:  # Redis failed it: back to the front, the oldest dropped if full
                outbox.put_back(batch)
                continue
            outbox.sent(batch)

    async def _xadd(self, batch: list[Event]) -> bool:
        async with self.link.commands.pipeline(transaction=False) as pipe:
            for e in batch:
                fields = cast("dict[FieldT, EncodableT]", encode(e))
                pipe.xadd(self.stream, fields, maxlen=self._max_entries, approximate=True)
            if self._load is not None and (report := self._load[0].outgoing()) is not None:
                pipe.publish(self._load[1], encode_report(report))
            await pipe.execute()
        return True

    async def apply(self) -> None:
        """Runs until cancelled: the other gateways' events into the local mirror."""
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
            event = decode(fields)
        except BadEntryError as exc:
            self._mirror.counters.skipped += 1
            log.debug("stream %s: %s", self.stream, exc)
            return
        self._mirror.apply(event, live=self.warmed)  # history read at start is not lag

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
