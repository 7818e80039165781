"""The httpx transport that health probes use, over a scripted upstream client (no sockets)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import httpx
import pytest

from gateway.http import http1
from gateway.http.client import ClientLimits, UpstreamClient
from gateway.probe_transport import Http1Transport, ProbeClient


class _Response:
    def __init__(self, status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> None:
        self.status_code, self.headers, self._body = status, headers, body
        self.closed = False

    async def aiter_raw(self) -> AsyncIterator[bytes]:
        yield self._body

    async def aclose(self) -> None:
        self.closed = True


class ScriptedClient(UpstreamClient):
    def __init__(self, outcome: object) -> None:
        super().__init__(ClientLimits())
        self.outcome = outcome
        self.sent: list[tuple[str, str, str, list[tuple[bytes, bytes]], bytes]] = []

    async def send(  # type: ignore[override]
        self,
        base_url: str,
        target: str,
        method: str,
        headers: list[tuple[bytes, bytes]],
        body: bytes,
    ) -> object:
        self.sent.append((base_url, target, method, headers, body))
        if isinstance(self.outcome, BaseException):
            raise self.outcome
        if self.outcome == "hang":
            await asyncio.sleep(60)
        return self.outcome


async def test_get_is_sent_and_answered_through_httpx() -> None:
    resp = _Response(200, [(b"content-type", b"text/plain")], b"vllm:x 1\n")
    client = ScriptedClient(resp)
    async with httpx.AsyncClient(transport=Http1Transport(client), timeout=1.0) as http:
        r = await http.get("http://10.0.0.5:8001/metrics?x=1", headers={"x-a": "1"})
    assert (r.status_code, r.text, r.headers["content-type"]) == (200, "vllm:x 1\n", "text/plain")
    base, target, method, headers, body = client.sent[0]
    assert (base, target, method, body) == ("http://10.0.0.5:8001", "/metrics?x=1", "GET", b"")
    assert (b"x-a", b"1") in headers
    assert all(k != b"host" for k, _ in headers)  # the client writes its own Host
    assert resp.closed


@pytest.mark.parametrize(
    ("ours", "theirs"),
    [
        (http1.ConnectError("refused"), httpx.ConnectError),
        (http1.ConnectTimeout("slow"), httpx.ConnectTimeout),
        (http1.ReadTimeout("slow"), httpx.ReadTimeout),
        (http1.RemoteProtocolError("closed"), httpx.RemoteProtocolError),
    ],
)
async def test_client_errors_become_httpx_errors(
    ours: http1.HttpClientError, theirs: type[httpx.HTTPError]
) -> None:
    async with httpx.AsyncClient(transport=Http1Transport(ScriptedClient(ours))) as http:
        with pytest.raises(theirs):
            await http.get("http://b:1/health")


async def test_httpx_timeout_bounds_the_exchange() -> None:
    transport = Http1Transport(ScriptedClient("hang"))
    async with httpx.AsyncClient(transport=transport, timeout=0.01) as http:
        with pytest.raises(httpx.ReadTimeout):
            await http.get("http://b:1/metrics")


async def test_probe_client_plain_gets_reuse_one_request() -> None:
    resp = _Response(200, [(b"content-type", b"text/plain; charset=utf-8")], b"vllm:x 1\n")
    client = ScriptedClient(resp)
    async with ProbeClient(client, timeout=1.0) as http:
        first = await http.get("http://10.0.0.5:8001/metrics", timeout=0.5)
        second = await http.get("http://10.0.0.5:8001/metrics", timeout=0.5)
        assert first.request is second.request  # built once
        first.raise_for_status()
        assert (first.status_code, first.text) == (200, "vllm:x 1\n")
        # What httpx itself would have sent: the same target, method and headers.
        await http.get("http://10.0.0.5:8001/metrics", timeout=0.5, headers={})
    (b1, t1, m1, h1, _), _, (b3, t3, m3, h3, _) = client.sent
    assert (b1, t1, m1, h1) == (b3, t3, m3, h3)
    assert (b1, t1, m1) == ("http://10.0.0.5:8001", "/metrics", "GET")


async def test_probe_client_errors_stay_httpx_errors() -> None:
    async with ProbeClient(ScriptedClient(http1.ConnectError("refused")), timeout=1.0) as http:
        with pytest.raises(httpx.ConnectError):
            await http.get("http://b:1/health", timeout=0.5)
    transport_timeout = ProbeClient(ScriptedClient("hang"), timeout=1.0)
    async with transport_timeout as http:
        with pytest.raises(httpx.ReadTimeout):
            await http.get("http://b:1/metrics", timeout=0.01)
