"""`ResponseAffinity`: which backend holds each stored response, here and through Redis.

`remember` puts the id in the local `ResponseOwners` and, with Redis, sets the key
`{namespace}:{pool}:responses:{id}` to the backend id with EX `ttl_s`, awaited (at most
`shared_timeout_s`) before the answer ends, so a follow-up sent to another gateway once the
client has the answer finds it. `pin` reads the local map, and on a miss makes one GET (at
most `shared_timeout_s`; what it finds is kept locally), or without Redis asks the sibling
workers of `serve --workers N`. `forget` drops a deleted id. Redis down or slow: the local
map alone (`RedisLink.quick`). Each outcome is counted (`EVENTS`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from gateway.responses.ids import valid_id
from gateway.responses.owners import ResponseOwners
from gateway.state.link import RedisLink
from routing.config.responses import ResponsesSection

# learned: an answer stored a response; local, shared: an id found here, or in Redis (or a
# sibling worker);
# unknown: found nowhere; gone, unavailable: its backend left the pool, or is down.
EVENTS = ("learned", "local", "shared", "unknown", "gone", "unavailable")


@dataclass(frozen=True, slots=True)
class Pin:
    """A request bound to the backend holding a stored response."""

    response_id: str
    backend_id: str


class ResponseAffinity:
    """Stored response id → backend, local and shared (see the module docstring)."""

    def __init__(
        self,
        section: ResponsesSection,
        clock: Callable[[], float],
        *,
        link: RedisLink | None = None,
        prefix: str = "kvgate:static",
        count: Callable[[str], None] = lambda event: None,
        siblings: Callable[[str, float], Awaitable[str | None]] | None = None,
    ) -> None:
        self.enabled = section.affinity
        self.owners = ResponseOwners(section.max_entries, section.ttl_s, clock)
        self._ttl = max(1, round(section.ttl_s))
        self._timeout = section.shared_timeout_s
        self._link = link
        self._prefix = f"{prefix}:responses:"
        self.count = count
        self._siblings = siblings  # the sibling workers' answer, when no Redis is shared

    def key(self, response_id: str) -> str:
        return self._prefix + response_id

    async def pin(self, response_id: str | None) -> Pin | None:
        """The pin for a request naming `response_id`, when affinity is on and its backend is
        known here or in Redis; None otherwise."""
        if not self.enabled or response_id is None or not valid_id(response_id):
            return None
        backend_id = self.owners.get(response_id)
        if backend_id is not None:
            self.count("local")
            return Pin(response_id, backend_id)
        backend_id = await self._shared(response_id)
        if backend_id is not None:
            self.owners.put(response_id, backend_id)
            self.count("shared")
            return Pin(response_id, backend_id)
        self.count("unknown")
        return None

    async def _shared(self, response_id: str) -> str | None:
        """The backend Redis (or else a sibling worker) knows for `response_id`."""
        if (link := self._link) is not None:
            key = self.key(response_id)
            value = await link.quick(lambda: link.commands.get(key), self._timeout)
            return value.decode("utf-8", "replace") if isinstance(value, bytes) and value else None
        if self._siblings is not None:
            return await self._siblings(response_id, self._timeout)
        return None

    async def remember(self, response_id: str, backend_id: str) -> None:
        """`backend_id` answered and stored `response_id`."""
        if not self.enabled or not valid_id(response_id):
            return
        self.owners.put(response_id, backend_id)
        self.count("learned")
        if (link := self._link) is not None:
            key, ttl = self.key(response_id), self._ttl
            await link.quick(lambda: link.commands.set(key, backend_id, ex=ttl), self._timeout)

    async def forget(self, response_id: str) -> None:
        """`response_id` was deleted from its backend (from Redis first: gone here, gone)."""
        if (link := self._link) is not None:
            key = self.key(response_id)
            await link.quick(lambda: link.commands.delete(key), self._timeout)
        self.owners.discard(response_id)
