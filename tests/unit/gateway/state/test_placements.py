"""The placement replicator against a scripted stand-in for Redis (no sockets)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, cast

import pytest

from gateway.state.codec import Placement, encode
from gateway.state.link import LinkSettings, RedisLink
from gateway.state.placements import PlacementReplicator
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


def _replicator(
    link: _FakeLink, record: Callable[[Placement], bool] | None = None, **kw: Any
) -> PlacementReplicator:
    return PlacementReplicator(
        cast(RedisLink, link), "ns:static:placements", "me", record or (lambda p: True), **kw
    )


def test_a_full_queue_drops_the_oldest_placements() -> None:
    r = _replicator(_FakeLink(), max_queue=3)
    for i in range(5):
        r.note(f"b{i}", [i], 64)
    assert (r.counters.queued, r.counters.dropped) == (5, 2)


async def test_placements_are_written_in_batches_and_kept_while_redis_is_down() -> None:
    link = _FakeLink()
    link.down = True
    r = _replicator(link, batch=2)
    for i in range(3):
        r.note("b", [i], 64)
    task = asyncio.create_task(r.publish())
    await asyncio.sleep(0.02)
    assert link.written == [] and r.counters.published == 0
    link.down = False
    await async_wait_until(lambda: r.counters.published == 3)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert [len(batch) for batch in link.written] == [2, 1]
    hashes = [fields[b"h"][0] for batch in link.written for fields in batch]
    assert hashes == [0, 1, 2]  # in dispatch order, none lost
    assert r.counters.dropped == 0


async def test_the_other_gateways_entries_are_applied_and_its_own_skipped() -> None:
    link = _FakeLink()
    applied: list[Placement] = []

    def record(p: Placement) -> bool:
        applied.append(p)
        return p.backend != "unknown"

    link.reads = [
        [
            (b"1-0", encode(Placement("me", "b1", 64, (1,), 0))),
            (b"2-0", encode(Placement("other", "b1", 64, (2, 3), 0))),
            (b"3-0", encode(Placement("other", "unknown", 64, (4,), 0))),
            (b"4-0", {b"junk": b"1"}),
        ]
    ]
    r = _replicator(link, record)
    task = asyncio.create_task(r.apply())
    await async_wait_until(lambda: r.warmed)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert [p.hashes for p in applied] == [(2, 3), (4,)]
    c = r.counters
    assert (c.received, c.applied, c.skipped) == (2, 1, 2)
