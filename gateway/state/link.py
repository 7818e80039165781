"""The gateway's link to Redis: clients, whether Redis answers, and the backoff between tries.

Two clients on the same URL: `commands` for short writes (a failed or slow command gives up
after `command_timeout_s`), and `blocking` for XREAD BLOCK, whose socket waits longer than
the block. Every loop that talks to Redis runs its work through `attempt`, which maps any
connection, timeout or server error to "down" (logged once per outage) and sleeps out a
backoff that doubles from `first_backoff_s` to `max_backoff_s`; the first success marks
Redis up again (logged) and resets the backoff. A request's own command goes through `quick`
instead: no backoff, skipped while the loops find Redis down. Nothing here raises into a
caller but `CancelledError`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from redis.asyncio import Redis
from redis.exceptions import RedisError

log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class LinkSettings:
    url: str
    command_timeout_s: float = 0.5
    block_ms: int = 1000  # longest XREAD wait
    first_backoff_s: float = 0.1
    max_backoff_s: float = 5.0


class RedisLink:
    """Redis clients plus up/down tracking shared by the state loops."""

    def __init__(self, settings: LinkSettings) -> None:
        self.settings = settings
        s = settings
        self.commands: Redis = Redis.from_url(
            s.url, socket_timeout=s.command_timeout_s, socket_connect_timeout=s.command_timeout_s
        )
        self.blocking: Redis = Redis.from_url(
            s.url,
            socket_timeout=s.block_ms / 1000 + s.command_timeout_s,
            socket_connect_timeout=s.command_timeout_s,
        )
        self.up = False
        self.outages = 0  # times Redis went from up (or never seen) to down
        self.last_error: str | None = None
        self.quick_failures = 0  # `quick` commands that failed or timed out
        self._backoff = s.first_backoff_s
        self._seen = False  # whether any command ever succeeded

    async def attempt(self, work: Callable[[], Awaitable[T]], timeout_s: float) -> T | None:
        """`work()` within `timeout_s`; None (after the backoff) when Redis failed it."""
        try:
            async with asyncio.timeout(timeout_s):
                result = await work()
        except (RedisError, OSError, TimeoutError) as exc:
            self._down(exc)
            await asyncio.sleep(self._backoff)
            self._backoff = min(self._backoff * 2, self.settings.max_backoff_s)
            return None
        self._mark_up()
        return result

    async def quick(self, work: Callable[[], Awaitable[T]], timeout_s: float) -> T | None:
        """`work()` within `timeout_s` for a request: None at once when it fails, and without
        trying while Redis is known down (the loops find when it is back). It never changes
        the link's state: one slow command does not take the shared state down."""
        if self._seen and not self.up:
            return None
        try:
            async with asyncio.timeout(timeout_s):
                return await work()
        except (RedisError, OSError, TimeoutError) as exc:
            self.quick_failures += 1
            log.debug("redis command for a request failed: %s", exc)
            return None

    def _down(self, exc: BaseException) -> None:
        self.last_error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        if self.up or not self._seen:
            self.outages += 1
            log.warning(
                "redis %s unreachable, routing on local state: %s",
                _redacted(self.settings.url),
                self.last_error,
            )
        self.up = False
        self._seen = True

    def _mark_up(self) -> None:
        if not self.up:
            log.info("redis %s reachable, sharing routing state", _redacted(self.settings.url))
        self.up = True
        self._seen = True
        self._backoff = self.settings.first_backoff_s

    async def aclose(self) -> None:
        for client in (self.commands, self.blocking):
            await client.aclose()


def _redacted(url: str) -> str:
    """The URL without a password (never logged)."""
    scheme, sep, rest = url.partition("://")
    if "@" in rest:
        rest = "***@" + rest.split("@", 1)[1]
    return scheme + sep + rest
