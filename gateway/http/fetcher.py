"""The health checks' `Fetcher` (`health.fetch`) over the gateway's own HTTP/1.1 client.

`health` probes every backend every few seconds and scrapes its metrics every 50 ms;
`UpstreamClient` sends those GETs for a fraction of httpx's cost
(docs/decisions/0001-own-http1-upstream-client.md). The fetcher gets its own client (pool and
limits) so probes never queue behind traffic.

A GET carries `accept` and `user-agent` besides what the client writes (Host,
Content-Length: 0); it asks for no content coding, so bodies arrive as sent. They are read
whole. `timeout_s` bounds the whole exchange; client failures become `FetchError`s that
name them ("ConnectError: ...").
"""

from __future__ import annotations

import asyncio
from urllib.parse import urlsplit

from gateway.http.client import Headers, UpstreamClient
from gateway.http.http1 import HttpClientError
from health.fetch import FetchError, FetchResult

_HEADERS: Headers = [(b"accept", b"*/*"), (b"user-agent", b"kvgate")]


class UpstreamFetcher:
    """A `health.fetch.Fetcher` over `client`; `aclose()` closes the client."""

    def __init__(self, client: UpstreamClient) -> None:
        self._client = client
        self._split: dict[str, tuple[str, str]] = {}  # url -> (origin, target), split once

    async def get(self, url: str, timeout_s: float) -> FetchResult:
        split = self._split.get(url)
        if split is None:
            split = self._split[url] = _split(url)
        base, target = split
        try:
            async with asyncio.timeout(timeout_s):
                resp = await self._client.send(base, target, "GET", _HEADERS, b"")
                try:
                    chunks = [chunk async for chunk in resp.aiter_raw()]
                finally:
                    await resp.aclose()
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
