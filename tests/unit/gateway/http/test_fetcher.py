"""The health checks' fetcher over a scripted upstream client (no sockets)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from gateway.http import http1
from gateway.http.client import ClientLimits, UpstreamClient
from gateway.http.fetcher import UpstreamFetcher
from health.fetch import FetchError, FetchResult


class _Response:
    def __init__(self, status: int, headers: list[tuple[bytes, bytes]], *chunks: bytes) -> None:
        self.status_code, self.headers, self._chunks = status, headers, chunks
        self.closed = False

    def header(self, name: bytes) -> bytes | None:
        return next((v for k, v in self.headers if k == name), None)

    async def aiter_raw(self) -> AsyncIterator[bytes]:
        for chunk in self._chunks:
            yield chunk

    async def aclose(self) -> None:
        self.closed = True


class ScriptedClient(UpstreamClient):
    def __init__(self, outcome: object) -> None:
        super().__init__(ClientLimits())
        self.outcome = outcome
        self.sent: list[tuple[str, str, str, list[tuple[bytes, bytes]], bytes]] = []
        self.closed = False

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

    async def aclose(self) -> None:
        self.closed = True


async def test_a_get_is_sent_and_read_whole() -> None:
    resp = _Response(200, [(b"content-type", b"text/plain; version=0.0.4")], b"vllm:x 1\n", b"y")
    client = ScriptedClient(resp)
    answer = await UpstreamFetcher(client).get("http://10.0.0.5:8001/metrics?x=1", 0.5)
    assert answer == FetchResult(200, b"vllm:x 1\ny", "text/plain; version=0.0.4")
    ((base, target, method, headers, body),) = client.sent
    assert (base, target, method, body) == ("http://10.0.0.5:8001", "/metrics?x=1", "GET", b"")
    assert dict(headers) == {b"accept": b"*/*", b"user-agent": b"kvgate"}  # no content coding
    assert resp.closed


@pytest.mark.parametrize(
    ("url", "base", "target"),
    [
        ("http://b:1", "http://b:1", "/"),
        ("http://b:1/engine/health", "http://b:1", "/engine/health"),
        ("https://b/v1/models", "https://b", "/v1/models"),
    ],
)
async def test_the_url_is_split_into_origin_and_target(url: str, base: str, target: str) -> None:
    client = ScriptedClient(_Response(200, [], b""))
    await UpstreamFetcher(client).get(url, 1.0)
    assert client.sent[0][:2] == (base, target)


async def test_an_error_status_is_an_answer() -> None:
    fetcher = UpstreamFetcher(ScriptedClient(_Response(503, [], b"busy")))
    assert await fetcher.get("http://b:1/health", 1.0) == FetchResult(503, b"busy", "")


@pytest.mark.parametrize(
    ("error", "message"),
    [
        (http1.ConnectError("refused"), "ConnectError: refused"),
        (http1.ConnectTimeout("slow"), "ConnectTimeout: slow"),
        (http1.ReadTimeout("no progress in 2 s"), "ReadTimeout: no progress in 2 s"),
        (http1.RemoteProtocolError("closed"), "RemoteProtocolError: closed"),
    ],
)
async def test_client_errors_become_fetch_errors(
    error: http1.HttpClientError, message: str
) -> None:
    with pytest.raises(FetchError) as caught:
        await UpstreamFetcher(ScriptedClient(error)).get("http://b:1/health", 1.0)
    assert str(caught.value) == message


async def test_the_timeout_bounds_the_whole_exchange() -> None:
    with pytest.raises(FetchError, match=r"^Timeout: no complete answer in 0.01 s$"):
        await UpstreamFetcher(ScriptedClient("hang")).get("http://b:1/metrics", 0.01)


async def test_aclose_closes_the_client() -> None:
    client = ScriptedClient(None)
    await UpstreamFetcher(client).aclose()
    assert client.closed
