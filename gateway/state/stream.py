"""Shared-state events through Redis streams: one stream per gateway, the publish and apply loops.

Each gateway appends its events to its own stream `{prefix}:events:{gateway}`, listed from its
start in the sorted set `{prefix}:streams` (score: start or last write, unix ms), and reads every
listed stream but its own: no gateway reads its own events back, and a dead gateway's
placements stay readable for `retention_s` (then its stream expires and leaves the list).

- `publish` waits for the `Outbox`, lets events gather `min_gap_s` after the last write, then
  sends in one pipelined round trip entries of up to `batch` events (`codec.pack_events`; XADD
  `MAXLEN ~ max_entries`), the registry and expiry renewed each second, a changed load report.
- `apply` reads the listed streams (looked up every 0.1 s at most) with one XREAD BLOCK of
  250 ms at most, each from where it left off, and hands every event to the `Mirror`; at start
  it reads without blocking until no stream has more (`warmed`: the gateway reports ready).
After an outage both loops reconnect with backoff and carry on from their last ids; each stream
keeps its writer's order (docs/decisions/0016-workers.md, 0025-stream-listed-at-start.md).
"""

from __future__ import annotations

import asyncio
import logging
import time
from functools import partial
from typing import Any, cast

from redis.typing import EncodableT, FieldT, KeyT, StreamIdT

from gateway.state.codec import BadEntryError, decode, pack_events, unpack_events
from gateway.state.link import RedisLink
from gateway.state.load import LoadReport, LoadSharing, encode_report
from gateway.state.outbox import Outbox
from scoring.state.events import Event
from scoring.state.mirror import Mirror

log = logging.getLogger(__name__)
_RENEW_S = 1.0


class EventStream:
    """Publishes this gateway's events and applies the other gateways' ones."""

    def __init__(
        self,
        link: RedisLink,
        prefix: str,
        gateway_id: str,
        outbox: Outbox,
        mirror: Mirror,
        *,
        max_entries: int = 20_000,
        batch: int = 64,
        min_gap_s: float = 0.005,
        retention_s: float = 600.0,
        block_ms: int = 250,
        list_every_s: float = 0.1,
        load: tuple[LoadSharing, str] | None = None,
    ) -> None:
        self.link = link
        self.registry = f"{prefix}:streams"
        self.stream = f"{prefix}:events:{gateway_id}"
        self._outbox = outbox
        self._mirror = mirror
        self._max_entries = max_entries
        self._batch = batch
        self._min_gap_s = min_gap_s
        self._retention_ms = int(retention_s * 1000)
        self._block_ms = min(block_ms, link.settings.block_ms)
        self._list_every_s = list_every_s
        self._load = load  # this gateway's load reports and their channel: sent along
        self._sent_at = 0.0
        self._renewed_at = -1e18
        self._read_from: dict[str, bytes] = {}  # another gateway's stream → last id read
        self.warmed = False  # the first reads since start have caught up with every stream

    # -- publish -------------------------------------------------------------------------
    async def publish(self) -> None:
        """Runs until cancelled: the outbox, in pipelined batches, to this gateway's stream."""
        outbox = self._outbox
        # Listed before its first write, so the others already read it when it comes: a
        # stream listed only with its first entry is found by the others after their next
        # look at the list, up to a blocked read (250 ms) plus `list_every_s` later — and a
        # gateway writes first when traffic starts, when it matters most (decision 0025).
        await self.link.attempt(self._register, self._timeout())
        while True:
            await outbox.wait()
            gap = self._sent_at + self._min_gap_s - time.monotonic()
            if gap > 0:
                await asyncio.sleep(gap)  # more events join this round trip
            events = outbox.take(self._batch * 16)
            report = self._load[0].outgoing() if self._load is not None else None
            if not events and report is None:
                continue  # poked, and the counts had not changed
            write = partial(self._write, events, report)
            sent = await self.link.attempt(write, self._timeout())
            self._sent_at = time.monotonic()
            if sent is None:  # Redis failed it: back to the front, the oldest dropped if full
                outbox.put_back(events)
                if self._load is not None:
                    self._load[0].resend()
                continue
            outbox.sent(events)

    async def _register(self) -> bool:
        """This gateway's stream in the registry (it exists once written; reading a stream
        that does not exist yet waits for its first entry)."""
        now_ms = int(time.time() * 1000)
        await self.link.commands.zadd(self.registry, {self.stream: now_ms})
        return True  # the first write sets the stream's expiry and lists it again

    async def _write(self, events: list[Event], report: LoadReport | None) -> bool:
        now = time.time()
        async with self.link.commands.pipeline(transaction=False) as pipe:
            for i in range(0, len(events), self._batch):
                fields = {b"e": pack_events(events[i : i + self._batch])}
                entry = cast("dict[FieldT, EncodableT]", fields)
                pipe.xadd(self.stream, entry, maxlen=self._max_entries, approximate=True)
            renew = bool(events) and now - self._renewed_at >= _RENEW_S
            if renew:
                now_ms = int(now * 1000)
                pipe.pexpire(self.stream, self._retention_ms)
                pipe.zadd(self.registry, {self.stream: now_ms})
                pipe.zremrangebyscore(self.registry, "-inf", now_ms - self._retention_ms)
            if self._load is not None and report is not None:
                pipe.publish(self._load[1], encode_report(report))
            await pipe.execute()
        if renew:
            self._renewed_at = now
        return True

    # -- apply ---------------------------------------------------------------------------
    async def apply(self) -> None:
        """Runs until cancelled: the other gateways' events into the local mirror."""
        block_ms = self._block_ms
        timeout = block_ms / 1000 + self._timeout()
        listed_at = -1e18
        while True:
            if time.monotonic() - listed_at >= self._list_every_s:
                listed = await self.link.attempt(self._listed, self._timeout())
                if listed is None:
                    continue
                listed_at = time.monotonic()
                self._follow(listed)
            if not self._read_from:  # nobody else writes: nothing to catch up with
                self.warmed = True
                await asyncio.sleep(self._list_every_s)  # until another gateway writes
                continue
            # Catching up (history at start): no wait on a quiet stream; readiness waits on it.
            block = block_ms if self.warmed else None
            streams = cast("dict[KeyT, StreamIdT]", dict(self._read_from))
            xread = partial(self.link.blocking.xread, streams, count=self._batch, block=block)
            read = await self.link.attempt(xread, timeout)
            if read is None:
                continue
            full = False
            for stream, entries in _entries(read):
                for entry_id, fields in entries:
                    self._read_from[stream] = entry_id
                    self._apply_entry(fields)
                full |= len(entries) >= self._batch
            if not full:
                self.warmed = True

    async def _listed(self) -> list[str]:
        """The streams the registry lists as written within the retention."""
        since = int(time.time() * 1000) - self._retention_ms
        keys = await self.link.commands.zrangebyscore(self.registry, since, "+inf")
        return [k.decode() if isinstance(k, bytes) else str(k) for k in keys]

    def _follow(self, listed: list[str]) -> None:
        for key in listed:
            if key != self.stream and key not in self._read_from:
                self._read_from[key] = b"0-0"  # its whole history
        for key in [k for k in self._read_from if k not in listed]:
            del self._read_from[key]  # expired

    def _apply_entry(self, fields: dict[bytes, bytes]) -> None:
        mirror = self._mirror
        try:
            batch = unpack_events(fields[b"e"])
        except (BadEntryError, KeyError) as exc:
            mirror.counters.skipped += 1
            log.debug("an entry of another gateway's stream: %r", exc)
            return
        for event_fields in batch:
            try:
                event = decode(event_fields)
            except BadEntryError as exc:
                mirror.counters.skipped += 1
                log.debug("an event of another gateway's stream: %s", exc)
                continue
            mirror.apply(event, live=self.warmed)  # history read at start is not lag

    def _timeout(self) -> float:
        return self.link.settings.command_timeout_s


def _entries(read: Any) -> list[tuple[str, list[tuple[bytes, dict[bytes, bytes]]]]]:
    """XREAD's answer (RESP2 list or RESP3 map of streams) as (stream, [(id, fields)])."""
    if not read:
        return []
    if isinstance(read, dict):
        pairs = [(k, v[0]) for k, v in read.items()]
    else:
        pairs = [(k, v) for k, v in read]
    return [(k.decode() if isinstance(k, bytes) else str(k), list(v)) for k, v in pairs]
