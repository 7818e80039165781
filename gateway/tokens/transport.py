"""How the engine tokenizer POSTs JSON to a backend: over httpx, or over the gateway's own
HTTP/1.1 client (`gateway.http.client.UpstreamClient`, pooled keep-alive connections).

`JsonPoster.post(base_url, path, body, timeout_s)` returns the status and the whole body;
it raises on connect, protocol and timeout errors (the caller counts them), with
`timeout_s` bounding the whole exchange.
"""

from __future__ import annotations

import asyncio
from typing import Protocol

import httpx

from gateway.http.client import Headers, UpstreamClient

_HEADERS: Headers = [(b"content-type", b"application/json"), (b"user-agent", b"kvgate")]
MAX_ANSWER_BYTES = 64 * 1024 * 1024  # ~8M token ids as JSON: longer than any context


class AnswerTooLargeError(ValueError):
    """The backend's answer was longer than `MAX_ANSWER_BYTES`."""


class JsonPoster(Protocol):
    """POSTs a JSON body and returns (status, body)."""

    async def post(
        self, base_url: str, path: str, body: bytes, timeout_s: float
    ) -> tuple[int, bytes]: ...


class HttpxPoster:
    """A `JsonPoster` over an `httpx.AsyncClient` (one of its own unless given)."""

    def __init__(self, client: httpx.AsyncClient | None = None) -> None:
        self._client = client or httpx.AsyncClient(headers={"user-agent": "kvgate"})

    async def post(
        self, base_url: str, path: str, body: bytes, timeout_s: float
    ) -> tuple[int, bytes]:
        async with asyncio.timeout(timeout_s):
            resp = await self._client.post(
                base_url.rstrip("/") + path,
                content=body,
                headers={"content-type": "application/json"},
                timeout=timeout_s,
            )
        return resp.status_code, resp.content

    async def aclose(self) -> None:
        await self._client.aclose()


class UpstreamPoster:
    """A `JsonPoster` over the gateway's `UpstreamClient` (pooled with the proxy's
    connections when it is the proxy's client); reads at most `MAX_ANSWER_BYTES`."""

    def __init__(self, client: UpstreamClient) -> None:
        self._client = client

    async def post(
        self, base_url: str, path: str, body: bytes, timeout_s: float
    ) -> tuple[int, bytes]:
        async with asyncio.timeout(timeout_s):
            resp = await self._client.send(base_url, path, "POST", _HEADERS, body)
            try:
                chunks, size = [], 0
                async for chunk in resp.aiter_raw():
                    size += len(chunk)
                    if size > MAX_ANSWER_BYTES:
                        raise AnswerTooLargeError(f"answer longer than {MAX_ANSWER_BYTES} bytes")
                    chunks.append(chunk)
            finally:
                await resp.aclose()  # pools the connection only if read to the end
        return resp.status_code, b"".join(chunks)
