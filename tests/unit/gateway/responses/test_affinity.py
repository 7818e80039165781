"""Where stored responses live: local memory, and Redis when shared (a scripted link here)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, cast

from gateway.responses.affinity import Pin, ResponseAffinity
from gateway.state.link import RedisLink
from routing.config.responses import ResponsesSection

T = TypeVar("T")


class FakeCommands:
    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}
        self.calls: list[tuple[Any, ...]] = []

    async def get(self, key: str) -> bytes | None:
        self.calls.append(("get", key))
        return self.data.get(key)

    async def set(self, key: str, value: str, ex: int) -> None:
        self.calls.append(("set", key, value, ex))
        self.data[key] = value.encode()

    async def delete(self, key: str) -> None:
        self.calls.append(("delete", key))
        self.data.pop(key, None)


class FakeLink:
    """`RedisLink.quick` over a dict; `down` plays a Redis the loops found down."""

    def __init__(self) -> None:
        self.commands = FakeCommands()
        self.down = False

    async def quick(self, work: Callable[[], Awaitable[T]], timeout_s: float) -> T | None:
        assert 0 < timeout_s <= 0.05
        return None if self.down else await work()


def _affinity(link: FakeLink | None = None, **section: Any) -> tuple[ResponseAffinity, list[str]]:
    events: list[str] = []
    affinity = ResponseAffinity(
        ResponsesSection(**section),
        lambda: 0.0,
        link=cast(RedisLink, link),
        prefix="ns:pool",
        count=events.append,
    )
    return affinity, events


async def test_local_memory_alone() -> None:
    affinity, events = _affinity()
    assert await affinity.pin("resp_1") is None
    await affinity.remember("resp_1", "b2")
    assert await affinity.pin("resp_1") == Pin("resp_1", "b2")
    await affinity.forget("resp_1")
    assert await affinity.pin("resp_1") is None
    assert events == ["unknown", "learned", "local", "unknown"]


async def test_shared_through_redis_with_the_ttl() -> None:
    link = FakeLink()
    a, events_a = _affinity(link, ttl_s=90.0)
    b, events_b = _affinity(link, ttl_s=90.0)
    await a.remember("resp_1", "b3")
    assert link.commands.calls == [("set", "ns:pool:responses:resp_1", "b3", 90)]
    assert await b.pin("resp_1") == Pin("resp_1", "b3")
    assert await b.pin("resp_1") == Pin("resp_1", "b3")  # then kept locally: one GET
    assert link.commands.calls[1:] == [("get", "ns:pool:responses:resp_1")]
    assert events_b == ["shared", "local"]
    await b.forget("resp_1")
    assert "ns:pool:responses:resp_1" not in link.commands.data
    assert events_a == ["learned"]


async def test_redis_down_leaves_local_memory() -> None:
    link = FakeLink()
    link.down = True
    affinity, _ = _affinity(link)
    await affinity.remember("resp_1", "b1")
    assert await affinity.pin("resp_1") == Pin("resp_1", "b1")
    assert await affinity.pin("resp_2") is None
    assert link.commands.calls == []


async def test_off_or_odd_ids_pin_nothing() -> None:
    link = FakeLink()
    off, events = _affinity(link, affinity=False)
    await off.remember("resp_1", "b1")
    assert await off.pin("resp_1") is None
    assert (events, link.commands.calls) == ([], [])
    on, _ = _affinity(link)
    await on.remember("bad id", "b1")
    assert await on.pin("bad id") is None
    assert await on.pin(None) is None
    assert link.commands.calls == []


async def test_without_redis_the_sibling_workers_are_asked() -> None:
    asked: list[tuple[str, float]] = []

    async def siblings(response_id: str, timeout_s: float) -> str | None:
        asked.append((response_id, timeout_s))
        return "b4" if response_id == "resp_1" else None

    events: list[str] = []
    affinity = ResponseAffinity(
        ResponsesSection(), lambda: 0.0, count=events.append, siblings=siblings
    )
    assert await affinity.pin("resp_1") == Pin("resp_1", "b4")
    assert await affinity.pin("resp_1") == Pin("resp_1", "b4")  # kept: asked once
    assert await affinity.pin("resp_2") is None
    assert asked == [("resp_1", 0.05), ("resp_2", 0.05)]
    assert events == ["shared", "local", "unknown"]
