"""One engine's KV-cache event stream: a ZMQ SUB socket, sequence tracking and replay.

`KvEventSubscriber.run()` connects a SUB socket to the engine's publisher (`endpoint`, topic
prefix `topic`), decodes each message (`adapters.kv_events`) and hands every batch, in
sequence order, to the synchronous `on_batch(backend_id, batch)`.

Batches are numbered 0, 1, 2, ... per publisher. A number past `last + 1` is a gap, filled from
the `replay` endpoint if any (what it cannot supply counts as `missed`), else counted; one
equal to `last` is a duplicate, one below it a restarted publisher (`restarts`). A subscriber that
joins past batch 0 replays what came before. Whenever the stream can no longer account for
the engine's whole cache, `on_lost(backend_id)` is called before the next batch. libzmq
reconnects with backoff (`backoff_first_s` to `backoff_max_s`), a socket error restarts with
the same; a bad message or a raising callback is counted and logged, never fatal. Cancelling
`run()` closes the sockets. Replay wire: docs/decisions/0010-precise-index.md.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import zmq
import zmq.asyncio

from adapters.kv_events import SEQ_BYTES, KvEventBatch, KvEventDecodeError, decode_message
from health.log_limit import LogLimit, describe

log = logging.getLogger(__name__)
END_OF_REPLAY = (-1).to_bytes(SEQ_BYTES, "big", signed=True)  # vLLM's end marker
OnBatch = Callable[[str, KvEventBatch], None]


@dataclass(frozen=True, slots=True)
class KvEventsSettings:
    """Where one engine publishes, and the subscriber's timings."""

    endpoint: str
    replay: str | None = None
    topic: str = ""
    backoff_first_s: float = 0.1
    backoff_max_s: float = 10.0
    replay_timeout_s: float = 2.0  # longest wait for each replayed message
    heartbeat_s: float = 2.0  # ZMTP heartbeats; a silent TCP peer is dropped after 3 of them


@dataclass(slots=True)
class KvEventCounters:
    """What the subscriber saw, for metrics and `/admin/backends`."""

    batches: int = 0  # delivered to on_batch, replayed ones included
    events: int = 0
    skipped_events: int = 0  # of unknown types
    gaps: int = 0  # times a batch number was skipped
    replayed: int = 0  # batches recovered through the replay socket
    missed: int = 0  # batches lost for good
    duplicates: int = 0
    restarts: int = 0  # the publisher's numbering went back
    decode_errors: int = 0
    callback_errors: int = 0
    reconnects: int = 0  # sockets closed and opened again after an error
    last_seq: int | None = None


class KvEventSubscriber:
    """Follows one backend's KV-event publisher until cancelled."""

    def __init__(
        self,
        backend_id: str,
        settings: KvEventsSettings,
        on_batch: OnBatch,
        clock: Callable[[], float] = time.monotonic,
        on_lost: Callable[[str], None] | None = None,
    ) -> None:
        self.backend_id = backend_id
        self.settings = settings
        self.counters = KvEventCounters()
        self._on_batch = on_batch
        self._on_lost = on_lost
        self._warn = LogLimit(log, clock)

    async def run(self) -> None:
        """Subscribe, and start over with a doubling backoff after a socket error."""
        delay = self.settings.backoff_first_s
        while True:
            ctx = zmq.asyncio.Context()
            delivered = self.counters.batches
            try:
                await self._follow(ctx)
            except zmq.ZMQError as exc:
                self.counters.reconnects += 1
                self._warn.warn("socket", "kv events of %s: %s", self.backend_id, exc)
            finally:
                ctx.destroy(linger=0)
            if self.counters.batches > delivered:  # the stream worked: start the backoff over
                delay = self.settings.backoff_first_s
            await asyncio.sleep(delay)
            delay = min(delay * 2, self.settings.backoff_max_s)

    async def _follow(self, ctx: zmq.asyncio.Context) -> None:
        s = self.settings
        sub = ctx.socket(zmq.SUB)
        sub.setsockopt(zmq.IPV6, 1)  # a pod's IP may be IPv6; IPv4 works either way
        sub.setsockopt(zmq.RECONNECT_IVL, int(s.backoff_first_s * 1000))
        sub.setsockopt(zmq.RECONNECT_IVL_MAX, int(s.backoff_max_s * 1000))
        sub.setsockopt(zmq.HEARTBEAT_IVL, int(s.heartbeat_s * 1000))
        sub.setsockopt(zmq.HEARTBEAT_TIMEOUT, int(s.heartbeat_s * 3000))
        sub.setsockopt(zmq.SUBSCRIBE, s.topic.encode())
        sub.connect(s.endpoint)
        while True:
            frames = await sub.recv_multipart()
            try:
                batch = decode_message(frames)
            except KvEventDecodeError as exc:
                self._decode_error(exc, frames)
                continue
            await self._accept(ctx, batch)

    async def _accept(self, ctx: zmq.asyncio.Context, batch: KvEventBatch) -> None:
        c, last = self.counters, self.counters.last_seq
        if last is not None and batch.seq == last:
            c.duplicates += 1
            return
        if last is not None and batch.seq < last:
            c.restarts += 1
            self._warn.warn(
                "restart", "kv events of %s restarted at %d", self.backend_id, batch.seq
            )
            self._lost()  # a new publisher: a new engine, whose cache starts empty
        elif last is not None and batch.seq > last + 1:
            c.gaps += 1
            await self._fill_gap(ctx, last + 1, batch.seq)
        elif last is None and batch.seq > 0 and self.settings.replay is not None:
            await self._fill_gap(ctx, 0, batch.seq)  # joined late: what the engine holds so far
        self._deliver(batch)

    def _lost(self) -> None:
        """The stream can no longer account for the engine's whole cache."""
        if self._on_lost is not None:
            self._on_lost(self.backend_id)

    async def _fill_gap(self, ctx: zmq.asyncio.Context, first: int, live: int) -> None:
        """Deliver batches `first` .. `live - 1` from the replay socket, if there is one (in
        order; those its buffer no longer holds are lost)."""
        recovered = 0
        if self.settings.replay is not None:
            for batch in sorted(await self._replay(ctx, first, live), key=lambda b: b.seq):
                if batch.seq > (self.counters.last_seq or -1):
                    self._deliver(batch)
                    recovered += 1
        self.counters.replayed += recovered
        lost = live - first - recovered
        self.counters.missed += lost
        if lost:
            self._lost()
            self._warn.warn(
                "gap", "kv events of %s: %d batch(es) before %d lost", self.backend_id, lost, live
            )

    async def _replay(self, ctx: zmq.asyncio.Context, first: int, live: int) -> list[KvEventBatch]:
        """Ask the ROUTER for batches from `first`; those below `live`, in order. A fresh
        DEALER per request, so a late answer to an abandoned request is never read."""
        assert self.settings.replay is not None
        timeout_ms = int(self.settings.replay_timeout_s * 1000)
        dealer = ctx.socket(zmq.DEALER)
        dealer.setsockopt(zmq.IPV6, 1)
        got: list[KvEventBatch] = []
        try:
            dealer.connect(self.settings.replay)
            await dealer.send_multipart([b"", first.to_bytes(SEQ_BYTES, "big")])
            while await dealer.poll(timeout_ms):
                frames = await dealer.recv_multipart()
                if _end_of_replay(frames):
                    return got
                try:
                    batch = decode_message(frames[1:])
                except KvEventDecodeError as exc:
                    self._decode_error(exc, frames)
                    continue
                if first <= batch.seq < live:
                    got.append(batch)
            self._warn.warn("replay", "kv events of %s: replay timed out", self.backend_id)
            return got
        finally:
            dealer.close(linger=0)

    def _deliver(self, batch: KvEventBatch) -> None:
        c = self.counters
        c.batches += 1
        c.events += len(batch.events)
        c.skipped_events += batch.skipped
        c.last_seq = batch.seq
        try:
            self._on_batch(self.backend_id, batch)
        except Exception as exc:  # the consumer's bug must not end the stream
            c.callback_errors += 1
            self._warn.warn(
                "callback",
                "kv events of %s: on_batch failed: %s",
                self.backend_id,
                describe(exc, ()),
            )

    def _decode_error(self, exc: KvEventDecodeError, frames: list[bytes]) -> None:
        self.counters.decode_errors += 1
        sizes = [len(f) for f in frames]
        self._warn.warn("decode", "kv events of %s: %s (frames %s)", self.backend_id, exc, sizes)


def _end_of_replay(frames: list[bytes]) -> bool:
    """vLLM's end marker: `[b"", b"", -1, b""]` (0.32: an empty topic frame), or without the
    topic frame, `[b"", -1, b""]`."""
    return len(frames) in (3, 4) and frames[-2] == END_OF_REPLAY and not frames[-1]
