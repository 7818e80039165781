"""Continuous client load on a gateway, every answer checked: for tests that change the pool
or the config under traffic.

`ContinuousLoad(url, model, clients=6)` runs `clients` workers, half streaming and half not,
each sending chat completions back to back until `stop()`. Each answer becomes a `Result`,
ok only if its status is 200 and its body is whole: a stream's data events end with
`data: [DONE]` and none is an error event; a plain answer has its `choices`. The backend
is read from `x-kvgate-backend` (set `security.backend_header: id` to get ids).
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import httpx
import orjson


@dataclass(frozen=True, slots=True)
class Result:
    """One request's outcome, with its monotonic start and end times."""

    started: float
    ended: float
    stream: bool
    status: int
    backend: str | None
    ok: bool
    error: str | None = None


class ContinuousLoad:
    """Workers sending requests to `url` until stopped; use in one event loop."""

    def __init__(
        self,
        url: str,
        model: str,
        clients: int = 6,
        *,
        max_tokens: int = 8,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        self._url = url
        self._model = model
        self._clients = clients
        self._max_tokens = max_tokens
        self._headers = dict(headers or {})
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._numbers = itertools.count()
        self.results: list[Result] = []

    async def __aenter__(self) -> ContinuousLoad:
        self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def start(self) -> None:
        for i in range(self._clients):
            self._tasks.append(asyncio.create_task(self._worker(stream=i % 2 == 0)))

    async def stop(self) -> list[Result]:
        """Let each worker finish its request in flight, then return every result."""
        self._stop.set()
        await asyncio.gather(*self._tasks)
        self._tasks = []
        return self.results

    def failed(self) -> list[Result]:
        return [r for r in self.results if not r.ok]

    def started_after(self, t: float) -> list[Result]:
        return [r for r in self.results if r.started >= t]

    async def _worker(self, *, stream: bool) -> None:
        limits = httpx.Limits(max_connections=2, max_keepalive_connections=2)
        async with httpx.AsyncClient(base_url=self._url, timeout=30.0, limits=limits) as client:
            while not self._stop.is_set():
                self.results.append(await self._one(client, stream))

    async def _one(self, client: httpx.AsyncClient, stream: bool) -> Result:
        n = next(self._numbers)
        body = {
            "model": self._model,
            "stream": stream,
            "max_tokens": self._max_tokens,
            "messages": [{"role": "user", "content": f"request {n}: say something about {n % 7}"}],
        }
        started = time.monotonic()
        try:
            async with client.stream(
                "POST", "/v1/chat/completions", json=body, headers=self._headers
            ) as resp:
                raw = await resp.aread()
                backend = resp.headers.get("x-kvgate-backend")
                status = resp.status_code
        except httpx.HTTPError as exc:
            return Result(started, time.monotonic(), stream, 0, None, False, repr(exc))
        error = _check(raw, stream) if status == 200 else f"status {status}: {raw[:200]!r}"
        return Result(started, time.monotonic(), stream, status, backend, error is None, error)


def _check(raw: bytes, stream: bool) -> str | None:
    """Why the body is not a whole answer, or None."""
    if not stream:
        try:
            ok = bool(orjson.loads(raw).get("choices"))
        except (orjson.JSONDecodeError, AttributeError):
            ok = False
        return None if ok else f"not a completion: {raw[:200]!r}"
    events = [line[6:] for line in raw.split(b"\n") if line.startswith(b"data: ")]
    if not events or events[-1] != b"[DONE]":
        return f"stream did not end with [DONE]: {raw[-200:]!r}"
    for event in events[:-1]:
        if b'"error"' in event:
            return f"error event: {event[:200]!r}"
    return None


def share(results: Sequence[Result], backend: str) -> float:
    """The fraction of `results` that `backend` served."""
    return sum(r.backend == backend for r in results) / len(results) if results else 0.0
