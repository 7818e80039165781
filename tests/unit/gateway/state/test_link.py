"""Up/down tracking and backoff of the Redis link (no server: the work is scripted)."""

from __future__ import annotations

import asyncio
import logging

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError

from gateway.state.link import LinkSettings, RedisLink, _redacted


async def _fail() -> int:
    raise RedisConnectionError("refused")


async def _ok() -> int:
    return 7


async def test_a_failure_marks_down_once_and_a_success_up_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    link = RedisLink(LinkSettings("redis://:secret@127.0.0.1:1/0", first_backoff_s=0.001))
    with caplog.at_level(logging.INFO, logger="gateway.state.link"):
        assert await link.attempt(_fail, 1.0) is None
        assert await link.attempt(_fail, 1.0) is None
        assert (link.up, link.outages) == (False, 1)
        assert link.last_error == "ConnectionError: refused"
        assert await link.attempt(_ok, 1.0) == 7
        assert link.up
        assert await link.attempt(_fail, 1.0) is None
    assert link.outages == 2
    text = caplog.text
    assert text.count("unreachable") == 2 and text.count("reachable, sharing") == 1
    assert "secret" not in text
    await link.aclose()


async def test_a_slow_command_counts_as_a_failure() -> None:
    link = RedisLink(LinkSettings("redis://127.0.0.1:1/0", first_backoff_s=0.001))

    async def slow() -> int:
        await asyncio.sleep(1)
        return 1

    assert await link.attempt(slow, 0.01) is None
    assert link.last_error == "TimeoutError" and not link.up
    await link.aclose()


def test_the_password_is_never_shown() -> None:
    assert _redacted("redis://user:pw@host:6379/0") == "redis://***@host:6379/0"
    assert _redacted("redis://host:6379/0") == "redis://host:6379/0"


async def test_a_request_command_fails_fast_and_leaves_the_state_to_the_loops() -> None:
    link = RedisLink(LinkSettings("redis://127.0.0.1:1/0", first_backoff_s=5.0))
    calls = 0

    async def slow() -> int:
        nonlocal calls
        calls += 1
        await asyncio.sleep(1)
        return 1

    started = asyncio.get_running_loop().time()
    assert await link.quick(slow, 0.01) is None  # no backoff slept, state unchanged
    assert await link.quick(_fail, 1.0) is None
    assert asyncio.get_running_loop().time() - started < 0.5
    assert (link.quick_failures, link.up, link.outages) == (2, False, 0)
    assert await link.quick(_ok, 1.0) == 7
    link._down(RedisConnectionError("refused"))  # as a loop finds it down
    assert await link.quick(slow, 1.0) is None and calls == 1  # not even tried
    await link.aclose()
