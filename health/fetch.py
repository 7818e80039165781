"""What `health` needs from an HTTP client: one GET, its answer read whole, within a timeout.

The prober and the scraper depend on this `Fetcher` protocol only; the gateway supplies one
over its own upstream client (`gateway.http.fetcher`), and tests supply an in-memory fake.
A fetcher returns any answer the backend sends, whatever its status, and raises
`FetchError` when there is none: no connection, a broken or unparsable response, or no
complete answer within `timeout_s` seconds, or a body longer than `max_bytes` (it stops
reading there: a backend cannot make the gateway hold an arbitrarily large page).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class FetchResult:
    """A backend's answer: status code, body (transfer-decoded) and Content-Type header."""

    status: int
    body: bytes
    content_type: str = ""

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300


class FetchError(Exception):
    """No answer: the backend was unreachable, broke off, or was too slow; says which."""


class Fetcher(Protocol):
    """Sends `GET url` and reads the whole answer, in at most `timeout_s` seconds and at
    most `max_bytes` of body (None: no limit)."""

    async def get(
        self, url: str, timeout_s: float, max_bytes: int | None = None
    ) -> FetchResult: ...
