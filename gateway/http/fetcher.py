"""The health checks' `Fetcher` (`health.fetch`) over the gateway's own HTTP/1.1 client,
reading at most `max_bytes` of any answer.

Probes and scrapes ask for at most `health.max_scrape_bytes` (4 MiB), so an answer is read
as it streams in and the read stops once it passes the cap: a backend cannot make the
gateway hold an arbitrarily large page. That answer is a `FetchError` and its connection is
closed, not pooled.

Besides the cap: a GET with
`accept` and `user-agent` and no content coding, `timeout_s` bounding the whole exchange,
client failures as `FetchError`s that name them ("ConnectError: ...").
"""

from __future__ import annotations

import asyncio
from urllib.parse import urlsplit

from gateway.http.client import Headers, UpstreamClient
from gateway.http.http1 import HttpClientError
from health.fetch import FetchError, FetchResult

_HEADERS: Headers = [(b"accept", b"*/*"), (b"user-agent", b"kvgate")]


class CappedFetcher:
    """A `health.fetch.Fetcher` over `client`; `aclose()` closes the client."""

    def __init__(self, client: UpstreamClient) -> None:
        self._client = client
        self._split: dict[str, tuple[str, str]] = {}  # url -> (origin, target), split once

    async def get(self, url: str, timeout_s: float, max_bytes: int | None = None) -> FetchResult:
        """GET `url`; a body longer than `max_bytes` (None: no cap) is a `FetchError`."""
        split = self._split.get(url)
        if split is None:
            split = self._split[url] = _split(url)
        base, target = split
        try:
            async with asyncio.timeout(timeout_s):
                resp = await self._client.send(base, target, "GET", _HEADERS, b"")
                try:
                    chunks, size = [], 0
                    async for chunk in resp.aiter_raw():
                        size += len(chunk)
                        if max_bytes is not None and size > max_bytes:
                            raise FetchError(f"TooLarge: answer longer than {max_bytes} bytes")
                        chunks.append(chunk)
                finally:
                    await resp.aclose()  # pools the connection only if read to the end
        except TimeoutError:
            raise FetchError(f"Timeout: no complete answer in {timeout_s:g} s") from None
        except HttpClientError as exc:
            raise FetchError(f"{type(exc).__name__}: {exc}") from None
        body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        content_type = resp.header(b"content-type")
        return FetchResult(resp.status_code, body, (content_type or b"").decode("latin-1"))

    async def aclose(self) -> None:
        await self._client.aclose()


def _split(url: str) -> tuple[str, str]:
    """`http://host:port/path?query` -> (`http://host:port`, `/path?query`)."""
    parts = urlsplit(url)
    target = parts.path or "/"
    if parts.query:
        target += "?" + parts.query
    return f"{parts.scheme}://{parts.netloc}", target
