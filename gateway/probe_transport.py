"""An httpx transport over the gateway's own HTTP/1.1 client, for health probes and scrapes.

`health` talks to backends through an `httpx.AsyncClient` (probes every few seconds, metric
scrapes every 50 ms per backend). Under the overhead benchmark those scrapes cost a tenth
of a core with no traffic at all, mostly in httpcore's connection pool and anyio; this
transport keeps httpx's API for `health` and sends the bytes with `UpstreamClient`. Bodies
are read whole (metrics pages, model lists); client errors become the matching httpx
exceptions, and httpx's per-request timeouts bound the whole exchange.

`ProbeClient` is that `httpx.AsyncClient`, with a shortcut for what `health` sends: the same
plain GET of the same URL, again and again. Building the request (URL parsing and merging,
headers, cookies) and httpx's send machinery cost more than the exchange itself, so the
request is built, and turned into what `UpstreamClient.send` takes, once per URL and timeout,
then handed straight to the transport. Nothing is lost that the probes use: no auth, no
redirects followed (httpx's default), and engines set no cookies. Any other call goes
through httpx unchanged.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import httpx
from httpx._client import USE_CLIENT_DEFAULT, UseClientDefault
from httpx._types import TimeoutTypes

from gateway.http import http1
from gateway.http.client import UpstreamClient

_DROP = frozenset({b"host", b"content-length", b"transfer-encoding", b"connection"})

_ERRORS: tuple[tuple[type[http1.HttpClientError], type[httpx.TransportError]], ...] = (
    (http1.ConnectTimeout, httpx.ConnectTimeout),
    (http1.ConnectError, httpx.ConnectError),
    (http1.ReadTimeout, httpx.ReadTimeout),
    (http1.WriteTimeout, httpx.WriteTimeout),
    (http1.PoolTimeout, httpx.PoolTimeout),
    (http1.ReadError, httpx.ReadError),
    (http1.HttpClientError, httpx.RemoteProtocolError),
)


@dataclass(frozen=True, slots=True)
class _Prepared:
    """What `UpstreamClient.send` needs from an httpx request, worked out once."""

    base: str
    target: str
    method: str
    headers: list[tuple[bytes, bytes]]
    body: bytes
    timeout: float | None


class Http1Transport(httpx.AsyncBaseTransport):
    """`httpx.AsyncClient(transport=Http1Transport(client))`: httpx's API, our client."""

    def __init__(self, client: UpstreamClient) -> None:
        self._client = client

    async def prepare(self, request: httpx.Request) -> _Prepared:
        url = request.url
        return _Prepared(
            base=f"{url.scheme}://{url.netloc.decode('ascii')}",
            target=url.raw_path.decode("ascii"),
            method=request.method,
            headers=[(k.lower(), v) for k, v in request.headers.raw if k.lower() not in _DROP],
            body=await request.aread(),
            timeout=_total_timeout(request),
        )

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        return await self.exchange(request, await self.prepare(request))

    async def exchange(self, request: httpx.Request, p: _Prepared) -> httpx.Response:
        """Send `request`, prepared as `p` (by `prepare`), and read its whole answer."""
        try:
            async with asyncio.timeout(p.timeout):
                resp = await self._client.send(p.base, p.target, p.method, p.headers, p.body)
                try:
                    chunks = [chunk async for chunk in resp.aiter_raw()]
                finally:
                    await resp.aclose()
        except TimeoutError:
            raise httpx.ReadTimeout("backend did not answer in time", request=request) from None
        except http1.HttpClientError as exc:
            raise _httpx_error(exc, request) from None
        content = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        return httpx.Response(
            resp.status_code, headers=resp.headers, content=content, request=request
        )

    async def aclose(self) -> None:
        await self._client.aclose()


class ProbeClient(httpx.AsyncClient):
    """An `httpx.AsyncClient` over `Http1Transport(client)` whose plain GETs skip httpx's
    request building and send machinery (see the module docstring)."""

    def __init__(self, client: UpstreamClient, timeout: float) -> None:
        self._http1 = Http1Transport(client)
        super().__init__(timeout=timeout, transport=self._http1, trust_env=False)
        self._gets: dict[tuple[str, Any], tuple[httpx.Request, _Prepared]] = {}

    async def get(
        self,
        url: httpx.URL | str,
        *,
        timeout: TimeoutTypes | UseClientDefault = USE_CLIENT_DEFAULT,  # noqa: ASYNC109 (httpx's)
        **kwargs: Any,
    ) -> httpx.Response:
        if kwargs or not isinstance(url, str) or not isinstance(timeout, int | float):
            return await super().get(url, timeout=timeout, **kwargs)
        key = (url, timeout)
        built = self._gets.get(key)
        if built is None:
            request = self.build_request("GET", url, timeout=timeout)
            built = self._gets[key] = (request, await self._http1.prepare(request))
        return await self._http1.exchange(*built)


def _total_timeout(request: httpx.Request) -> float | None:
    t = request.extensions.get("timeout") or {}
    parts = [t.get(k) for k in ("connect", "read")]
    return None if any(p is None for p in parts) else sum(p for p in parts if p is not None)


def _httpx_error(exc: http1.HttpClientError, request: httpx.Request) -> httpx.TransportError:
    for ours, theirs in _ERRORS:
        if isinstance(exc, ours):
            return theirs(str(exc), request=request)
    return httpx.RemoteProtocolError(str(exc), request=request)
