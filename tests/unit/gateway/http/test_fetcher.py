"""The capped health fetcher over a scripted upstream client (no sockets)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from gateway.http import http1
from gateway.http.client import ClientLimits, UpstreamClient
from gateway.http.fetcher import CappedFetcher
from health.fetch import FetchError, FetchResult


class _Response:
    def __init__(self, status: int, *chunks: bytes) -> None:
        self.status_code, self._chunks = status, chunks
        self.taken = 0
        self.closed = False

    def header(self, name: bytes) -> bytes | None:
        return b"text/plain" if name == b"content-type" else None

    async def aiter_raw(self) -> AsyncIterator[bytes]:
        for chunk in self._chunks:
            self.taken += 1
            yield chunk

    async def aclose(self) -> None:
        self.closed = True


class _Client(UpstreamClient):
    def __init__(self, outcome: object) -> None:
        super().__init__(ClientLimits())
        self.outcome = outcome
        self.sent: list[tuple[str, str]] = []

    async def send(  # type: ignore[override]
        self, base_url: str, target: str, method: str, headers: object, body: bytes
    ) -> object:
        self.sent.append((base_url, target))
        if isinstance(self.outcome, BaseException):
            raise self.outcome
        return self.outcome


async def test_an_answer_within_the_cap_is_read_whole() -> None:
    client = _Client(_Response(200, b"a" * 10, b"b" * 10))
    answer = await CappedFetcher(client).get("http://b:1/metrics?x=1", 1.0, max_bytes=20)
    assert answer == FetchResult(200, b"a" * 10 + b"b" * 10, "text/plain")
    assert client.sent == [("http://b:1", "/metrics?x=1")]


async def test_reading_stops_at_the_cap_and_the_connection_is_not_kept() -> None:
    # Issue 15, defect 8: scraped pages had no size cap (a page was read whole, any size).
    resp = _Response(200, *[b"x" * 1000] * 100)
    with pytest.raises(FetchError, match=r"^TooLarge: answer longer than 2500 bytes$"):
        await CappedFetcher(_Client(resp)).get("http://b:1/metrics", 1.0, max_bytes=2500)
    assert resp.taken == 3  # not the other 97 chunks
    assert resp.closed


async def test_client_errors_become_fetch_errors() -> None:
    fetcher = CappedFetcher(_Client(http1.ConnectError("refused")))
    with pytest.raises(FetchError, match=r"^ConnectError: refused$"):
        await fetcher.get("http://b:1/health", 1.0)
