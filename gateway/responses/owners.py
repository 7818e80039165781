"""`ResponseOwners`: stored response id → the backend that holds it, bounded and expiring.

An LRU of at most `max_entries` ids; an entry lives `ttl_s` from when it was last written
(reading does not extend it, as a Redis key set with EX does not). Time is the injected
`clock` (seconds), read only on calls; nothing runs in the background.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable


class ResponseOwners:
    """The local map of stored responses to their backends (see the module docstring)."""

    __slots__ = ("_clock", "_entries", "max_entries", "ttl_s")

    def __init__(self, max_entries: int, ttl_s: float, clock: Callable[[], float]) -> None:
        if max_entries < 1 or ttl_s <= 0:
            raise ValueError("max_entries must be at least 1 and ttl_s positive")
        self.max_entries = max_entries
        self.ttl_s = ttl_s
        self._clock = clock
        self._entries: OrderedDict[str, tuple[str, float]] = OrderedDict()  # id → (backend, expiry)

    def __len__(self) -> int:
        return len(self._entries)

    def put(self, response_id: str, backend_id: str, ttl_s: float | None = None) -> None:
        """`backend_id` holds `response_id` from now on, for `ttl_s` (default: the store's)."""
        entries = self._entries
        entries[response_id] = (backend_id, self._clock() + (ttl_s or self.ttl_s))
        entries.move_to_end(response_id)
        while len(entries) > self.max_entries:
            entries.popitem(last=False)

    def get(self, response_id: str) -> str | None:
        """The backend holding `response_id`, or None (never seen, evicted or expired)."""
        entry = self._entries.get(response_id)
        if entry is None:
            return None
        backend_id, expires = entry
        if self._clock() >= expires:
            del self._entries[response_id]
            return None
        self._entries.move_to_end(response_id)
        return backend_id

    def discard(self, response_id: str) -> None:
        """Forget `response_id` (it was deleted)."""
        self._entries.pop(response_id, None)
