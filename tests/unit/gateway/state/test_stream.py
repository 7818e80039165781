"""The event streams against a scripted stand-in for Redis (no sockets)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, cast

import msgpack  # type: ignore[import-untyped]
import pytest

from gateway.state.codec import pack_events, unpack_events
from gateway.state.link import LinkSettings, RedisLink
from gateway.state.outbox import Outbox
from gateway.state.stream import EventStream
from scoring.state.events import Event, EventCounters, Forget, Placement
from scoring.state.mirror import Mirror
from scoring.state.prefix_index import PrefixIndex
from tests.support.waiting import async_wait_until

T = TypeVar("T")
OWN = "ns:static:events:me"


class _Pipeline:
    def __init__(self, link: _FakeLink) -> None:
        self._link = link
        self._pending: list[tuple[str, Any]] = []

    async def __aenter__(self) -> _Pipeline:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None

    def xadd(self, stream: str, fields: dict[bytes, bytes], **kw: Any) -> None:
        self._pending.append(("xadd", (stream, fields)))

    def pexpire(self, key: str, ms: int) -> None:
        self._pending.append(("pexpire", key))

    def zadd(self, key: str, mapping: dict[str, int]) -> None:
        self._pending.append(("zadd", mapping))

    def zremrangebyscore(self, key: str, low: object, high: object) -> None:
        self._pending.append(("zrem", key))

    def publish(self, channel: str, data: bytes) -> None:
        self._pending.append(("publish", channel))

    async def execute(self) -> None:
        self._link.written.append(self._pending)


class _FakeLink:
    """What the stream uses of `RedisLink`: `attempt` fails while `down` is set."""

    def __init__(self) -> None:
        self.settings = LinkSettings("redis://test", block_ms=10)
        self.down = False
        self.written: list[list[tuple[str, Any]]] = []
        self.registered: list[tuple[str, dict[str, int]]] = []  # ZADDs outside a pipeline
        self.listed = [OWN]
        self.reads: list[dict[str, list[tuple[bytes, dict[bytes, bytes]]]]] = []
        self.asked: list[dict[str, bytes]] = []
        self.commands = self
        self.blocking = self

    def pipeline(self, transaction: bool) -> _Pipeline:
        return _Pipeline(self)

    async def zadd(self, key: str, mapping: dict[str, int]) -> int:
        self.registered.append((key, dict(mapping)))
        return 1

    async def zrangebyscore(self, key: str, low: object, high: object) -> list[bytes]:
        return [k.encode() for k in self.listed]

    async def xread(self, streams: dict[str, bytes], count: int, block: int | None) -> object:
        self.asked.append(dict(streams))
        await asyncio.sleep(0)
        if not self.reads:
            await asyncio.sleep((block or 0) / 1000)
            return []
        return [[k.encode(), v] for k, v in self.reads.pop(0).items() if k in streams]

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
    return EventStream(cast(RedisLink, link), "ns:static", "me", outbox, mirror, **kw)


def _note(s: EventStream, backend: str, hashes: list[int]) -> None:
    s._outbox.put(Placement("me", backend, 64, tuple(hashes), 0))


async def _stop(task: asyncio.Task[None]) -> None:
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


def test_a_full_queue_drops_the_oldest_events() -> None:
    s = _stream(_FakeLink(), max_queue=3)
    for i in range(5):
        _note(s, f"b{i}", [i])
    c = s._mirror.counters
    assert (c.queued, c.dropped) == (5, 2)


async def test_events_go_in_batched_entries_to_its_own_stream_and_wait_while_redis_is_down() -> (
    None
):
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
    await _stop(task)
    [commands] = link.written  # one round trip
    entries = [args for name, args in commands if name == "xadd"]
    assert [stream for stream, _ in entries] == [OWN, OWN]
    batches = [unpack_events(fields[b"e"]) for _, fields in entries]
    assert [len(b) for b in batches] == [2, 1]
    hashes = [f[b"h"][0] for b in batches for f in b]
    assert hashes == [0, 1, 2]  # in dispatch order, none lost
    names = [name for name, _ in commands]
    assert "zadd" in names and "pexpire" in names  # listed, and expiring unless written
    assert c.dropped == 0


async def test_the_other_gateways_streams_are_read_and_its_own_never() -> None:
    link = _FakeLink()
    other = "ns:static:events:other"
    link.listed = [OWN, other]
    mirror = _Mirror({"b1"})
    events: list[Event] = [
        Placement("other", "b1", 64, (2, 3), 0),
        Placement("other", "unknown", 64, (4,), 0),
        Forget("other", "b1", 0),
    ]
    link.reads = [
        {
            other: [
                (b"1-0", {b"e": pack_events(events[:2])}),
                (b"2-0", {b"junk": b"1"}),
                (b"3-0", {b"e": msgpack.packb([{b"g": b"other"}])}),
                (b"4-0", {b"e": pack_events(events[2:])}),
            ]
        }
    ]
    s = _stream(link, mirror)
    task = asyncio.create_task(s.apply())
    await async_wait_until(lambda: s.warmed)
    await _stop(task)
    assert link.asked[0] == {other: b"0-0"}  # its whole history, and not this gateway's own
    assert [type(e).__name__ for e in mirror.seen] == ["Placement", "Placement", "Forget"]
    c = mirror.counters
    assert (c.received, c.applied, c.skipped) == (3, 2, 3)
    assert c.lag_ms_last is None  # history read at start is not lag
    assert s._read_from == {other: b"4-0"}


async def test_a_lone_gateway_reads_nothing_and_is_warm_at_once() -> None:
    link = _FakeLink()
    s = _stream(link)
    task = asyncio.create_task(s.apply())
    await async_wait_until(lambda: s.warmed)
    await _stop(task)
    assert link.asked == []


async def test_a_poke_sends_the_changed_load_report_alone_and_nothing_when_unchanged() -> None:
    from gateway.state.load import LoadSharing

    link, counts = _FakeLink(), {"b": (1, 0)}
    mirror = _Mirror({"b"})
    load = LoadSharing("me", lambda: counts)
    outbox = Outbox("me", mirror.counters)
    s = EventStream(
        cast(RedisLink, link), "ns:static", "me", outbox, mirror, load=(load, "ns:static:load:me")
    )
    task = asyncio.create_task(s.publish())
    outbox.poke()  # a request ended
    await async_wait_until(lambda: len(link.written) == 1)
    assert [name for name, _ in link.written[0]] == ["publish"]  # the report, no entry
    outbox.poke()  # nothing changed since: no round trip
    await asyncio.sleep(0.02)
    assert len(link.written) == 1
    counts["b"] = (0, 0)
    outbox.poke()
    await async_wait_until(lambda: len(link.written) == 2)
    await _stop(task)


async def test_a_gateway_lists_its_stream_before_its_first_write() -> None:
    link = _FakeLink()
    s = _stream(link)
    task = asyncio.create_task(s.publish())
    await async_wait_until(lambda: bool(link.registered))
    assert link.written == []  # nothing written yet, and already listed for the others
    [(key, members)] = link.registered
    assert (key, list(members)) == ("ns:static:streams", [OWN])
    _note(s, "b", [1])
    await async_wait_until(lambda: len(link.written) == 1)
    names = [name for name, _ in link.written[0]]
    assert "pexpire" in names  # the first write sets the stream's expiry
    await _stop(task)
