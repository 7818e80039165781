"""The event stream against a scripted stand-in for Redis (no sockets)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, cast

import pytest

from gateway.state.codec import Event, Forget, Placement, encode
from gateway.state.link import LinkSettings, RedisLink
from gateway.state.mirror import Mirror
from gateway.state.outbox import EventCounters, Outbox
from gateway.state.stream import EventStream
from scoring.prefix_index import PrefixIndex
from tests.support.waiting import async_wait_until

T = TypeVar("T")


class _Pipeline:
    def __init__(self, link: _FakeLink) -> None:
        self._link = link
        self._pending: list[dict[bytes, bytes]] = []

    async def __aenter__(self) -> _Pipeline:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None

    def xadd(self, stream: str, fields: dict[bytes, bytes], **kw: Any) -> None:
        self._pending.append(fields)

    async def execute(self) -> None:
        self._link.written.append(self._pending)


class _FakeLink:
    """What the replicator uses of `RedisLink`: `attempt` fails while `down` is set."""

    def __init__(self) -> None:
        self.settings = LinkSettings("redis://test", block_ms=10)
        self.down = False
        self.written: list[list[dict[bytes, bytes]]] = []
        self.reads: list[list[tuple[bytes, dict[bytes, bytes]]]] = []
        self.commands = self
        self.blocking = self

    def pipeline(self, transaction: bool) -> _Pipeline:
        return _Pipeline(self)

    async def xread(self, streams: dict[str, bytes], count: int, block: int) -> object:
        await asyncio.sleep(0)
        if not self.reads:
            await asyncio.sleep(block / 1000)
            return []
        return [[b"s", self.reads.pop(0)]]

    async def attempt(self, work: Callable[[], Awaitable[T]], timeout_s: float) -> T | None:
        if self.down:
            await asyncio.sleep(0.001)
            return None
        return await work()


class _Mirror(Mirror):
    """The real mirror, recording what it is handed."""

    def __init__(self, known: set[str]) -> None:
        super().__init__("me", EventCounters(), PrefixIndex(), lambda: 64, known.__contains__)
        self.seen: list[Event] = []

    def apply(self, event: Event, *, live: bool = True) -> None:
        if event.gateway != "me":
            self.seen.append(event)
        super().apply(event, live=live)


def _stream(link: _FakeLink, mirror: Mirror | None = None, **kw: Any) -> EventStream:
    mirror = mirror or _Mirror({"b"})
    outbox = Outbox("me", mirror.counters, max_queue=kw.pop("max_queue", 10_000))
    return EventStream(cast(RedisLink, link), "ns:static:events", outbox, mirror, **kw)


def _note(s: EventStream, backend: str, hashes: list[int]) -> None:
    s._outbox.put(Placement("me", backend, 64, tuple(hashes), 0))


def test_a_full_queue_drops_the_oldest_events() -> None:
    s = _stream(_FakeLink(), max_queue=3)
    for i in range(5):
        _note(s, f"b{i}", [i])
    c = s._mirror.counters
    assert (c.queued, c.dropped) == (5, 2)


async def test_events_are_written_in_batches_and_kept_while_redis_is_down() -> None:
    link = _FakeLink()
    link.down = True
    s = _stream(link, batch=2)
    for i in range(3):
        _note(s, "b", [i])
    task = asyncio.create_task(s.publish())
    await asyncio.sleep(0.02)
    c = s._mirror.counters
    assert link.written == [] and c.published == 0
    link.down = False
    await async_wait_until(lambda: c.published == 3)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert [len(batch) for batch in link.written] == [2, 1]
    hashes = [fields[b"h"][0] for batch in link.written for fields in batch]
    assert hashes == [0, 1, 2]  # in dispatch order, none lost
    assert c.dropped == 0


async def test_the_other_gateways_entries_are_applied_and_its_own_skipped() -> None:
    link = _FakeLink()
    mirror = _Mirror({"b1"})
    link.reads = [
        [
            (b"1-0", encode(Placement("me", "b1", 64, (1,), 0))),
            (b"2-0", encode(Placement("other", "b1", 64, (2, 3), 0))),
            (b"3-0", encode(Placement("other", "unknown", 64, (4,), 0))),
            (b"4-0", {b"junk": b"1"}),
            (b"5-0", encode(Forget("other", "b1", 0))),
        ]
    ]
    s = _stream(link, mirror)
    task = asyncio.create_task(s.apply())
    await async_wait_until(lambda: s.warmed)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert [type(e).__name__ for e in mirror.seen] == ["Placement", "Placement", "Forget"]
    c = mirror.counters
    assert (c.received, c.applied, c.skipped) == (3, 2, 2)
    assert c.lag_ms_last is None  # history read at start is not lag
