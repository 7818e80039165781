"""Send a workload through an OpenAI-compatible endpoint and time every answer.

Closed loop (`run_closed_loop`): each conversation starts at its offset (or, given a number
of clients, when a client is free) and sends its turns one after another, each carrying the
whole history (system prompt, earlier turns and answers), so how fast turns follow each
other depends on the system under test. Open loop
(`run_open_loop`): each request is sent at its scheduled time whatever happened before.
Every request streams, so the time to first token is measured as a client sees it; the gaps
between streamed chunks are kept too.

Several front ends (`Fronts`: gateway replicas with no balancer between them and the clients)
are spread over by the clients themselves: `client` (client i sends to front i mod n, so a
conversation stays on one front), or `request` (every request to the next front in turn).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Literal

import httpx
import orjson

from routing.percentile import percentile
from sim.workloads import Conversation, TimedRequest


@dataclass(frozen=True, slots=True)
class RequestResult:
    """One request as the client saw it; `error` is None when it succeeded."""

    request: str  # conversation id (closed loop) or `req-<n>` (open loop)
    ttft_s: float | None
    duration_s: float
    status: int
    backend: str | None  # the gateway's x-kvgate-backend header, if any
    error: str | None = None
    itls_s: tuple[float, ...] = ()  # gaps between streamed output chunks
    prefill_backend: str | None = None  # x-kvgate-prefill-backend: a split P/D request's P


@dataclass(frozen=True, slots=True)
class Fronts:
    """Several front ends the clients spread over themselves (see the module docstring)."""

    urls: tuple[str, ...]
    spread: Literal["client", "request"] = "client"


Pick = Callable[[], httpx.AsyncClient]  # the connection pool the next request goes through


@contextlib.asynccontextmanager
async def _pickers(
    target: str | Fronts, limits: httpx.Limits, timeout_s: float
) -> AsyncIterator[Callable[[int], Pick]]:
    """`picker(i)`: what client (or conversation) `i` sends through."""
    fronts = target if isinstance(target, Fronts) else Fronts((target,))
    async with contextlib.AsyncExitStack() as stack:
        pools = [
            await stack.enter_async_context(
                httpx.AsyncClient(base_url=url, timeout=timeout_s, limits=limits)
            )
            for url in fronts.urls
        ]
        turn = itertools.count()

        def picker(i: int) -> Pick:
            if fronts.spread == "request":
                return lambda: pools[next(turn) % len(pools)]
            pool = pools[i % len(pools)]
            return lambda: pool

        yield picker


@dataclass(slots=True)
class RunStats:
    """What a run has done so far: finished requests and how many are in flight."""

    results: list[RequestResult] = field(default_factory=list)
    in_flight: int = 0

    @property
    def errors(self) -> int:
        return sum(1 for r in self.results if r.error)


async def run_closed_loop(
    base_url: str | Fronts,
    model: str,
    conversations: list[Conversation],
    stats: RunStats,
    headers_for: Callable[[Conversation], Mapping[str, str]] = lambda c: {},
    *,
    clients: int | None = None,
) -> None:
    """Every conversation as streamed chat completions, a turn after the previous answer.
    With `clients`, that many clients take the conversations in order, each the next one
    once its last one ended (start offsets are then ignored)."""
    limits = httpx.Limits(max_connections=256, max_keepalive_connections=256)
    async with _pickers(base_url, limits, 120.0) as picker:
        t0 = time.monotonic()
        async with asyncio.TaskGroup() as tg:
            if clients is not None:
                queue = iter(conversations)  # shared: each conversation is taken once
                for i in range(clients):
                    tg.create_task(_client(picker(i), model, queue, stats, headers_for))
                return
            for i, conv in enumerate(conversations):
                headers = dict(headers_for(conv))
                tg.create_task(
                    _conversation(picker(i), model, conv, t0=t0, stats=stats, headers=headers)
                )


async def _client(
    client: Pick,
    model: str,
    queue: Iterator[Conversation],
    stats: RunStats,
    headers_for: Callable[[Conversation], Mapping[str, str]],
) -> None:
    for conv in queue:
        await _chat(client, model, conv, stats=stats, headers=dict(headers_for(conv)))


async def _conversation(
    client: Pick,
    model: str,
    conv: Conversation,
    *,
    t0: float,
    stats: RunStats,
    headers: dict[str, str],
) -> None:
    await asyncio.sleep(max(0.0, t0 + conv.start_s - time.monotonic()))
    await _chat(client, model, conv, stats=stats, headers=headers)


async def _chat(
    client: Pick,
    model: str,
    conv: Conversation,
    *,
    stats: RunStats,
    headers: dict[str, str],
) -> None:
    messages: list[dict[str, str]] = [{"role": "system", "content": conv.system_prompt}]
    for user in conv.user_turns:
        messages.append({"role": "user", "content": user})
        body = {
            "model": model,
            "messages": messages,
            "stream": True,
            "max_tokens": conv.output_tokens,
        }
        stats.in_flight += 1
        try:
            result, answer = await _turn(client(), body, conv.id, headers)
        finally:
            stats.in_flight -= 1
        stats.results.append(result)
        if result.error:
            return
        messages.append({"role": "assistant", "content": answer})


async def _turn(
    client: httpx.AsyncClient, body: dict[str, object], conv_id: str, headers: dict[str, str]
) -> tuple[RequestResult, str]:
    start = time.monotonic()
    ttft: float | None = None
    parts: list[str] = []
    stamps: list[float] = []
    try:
        async with client.stream(
            "POST", "/v1/chat/completions", json=body, headers=headers
        ) as resp:
            backend = resp.headers.get("x-kvgate-backend")
            prefill_backend = resp.headers.get("x-kvgate-prefill-backend")
            if resp.status_code != 200:
                await resp.aread()
                duration = time.monotonic() - start
                failed = RequestResult(
                    conv_id, None, duration, resp.status_code, backend, resp.text[:200]
                )
                return failed, ""
            async for line in resp.aiter_lines():
                if not line.startswith("data: {"):
                    continue
                chunk = orjson.loads(line[6:])
                if "error" in chunk:
                    raise RuntimeError(str(chunk["error"]))
                for choice in chunk.get("choices", []):
                    text = choice.get("delta", {}).get("content")
                    if text:
                        stamps.append(time.monotonic())
                        if ttft is None:
                            ttft = stamps[0] - start
                        parts.append(text)
    except (httpx.HTTPError, RuntimeError) as exc:
        return RequestResult(conv_id, ttft, time.monotonic() - start, 0, None, repr(exc)), ""
    duration = time.monotonic() - start
    result = RequestResult(
        conv_id, ttft, duration, 200, backend, None, _gaps(stamps), prefill_backend
    )
    return result, "".join(parts)


def _gaps(stamps: list[float]) -> tuple[float, ...]:
    return tuple(b - a for a, b in itertools.pairwise(stamps))


async def run_open_loop(
    base_url: str | Fronts,
    requests: list[TimedRequest],
    stats: RunStats,
    headers: Mapping[str, str] | None = None,
) -> None:
    """Each request sent at its time, with `headers` added to its own (over several fronts:
    round-robin by request, whatever the spread)."""
    limits = httpx.Limits(max_connections=1024, max_keepalive_connections=256)
    common = {"content-type": "application/json", **(headers or {})}
    async with _pickers(base_url, limits, 600.0) as picker:
        t0 = time.monotonic()
        async with asyncio.TaskGroup() as tg:
            for i, req in enumerate(requests):
                await asyncio.sleep(max(0.0, t0 + req.at_s - time.monotonic()))
                headers = {**common, **req.headers}
                client = picker(i)()
                tg.create_task(_timed(client, req, f"req-{i}", stats=stats, headers=headers))


async def _timed(
    client: httpx.AsyncClient,
    req: TimedRequest,
    rid: str,
    *,
    stats: RunStats,
    headers: dict[str, str],
) -> None:
    start = time.monotonic()
    ttft: float | None = None
    stats.in_flight += 1
    try:
        async with client.stream("POST", req.path, content=req.body, headers=headers) as resp:
            backend = resp.headers.get("x-kvgate-backend")
            prefill_backend = resp.headers.get("x-kvgate-prefill-backend")
            if resp.status_code != 200:
                text = (await resp.aread())[:200].decode(errors="replace")
                duration = time.monotonic() - start
                stats.results.append(
                    RequestResult(rid, None, duration, resp.status_code, backend, text)
                )
                return
            stamps: list[float] = []
            async for line in resp.aiter_lines():
                if line.startswith("data: {") and '"choices":[{' in line:
                    stamps.append(time.monotonic())
                    if ttft is None:
                        ttft = stamps[0] - start
            duration = time.monotonic() - start
            stats.results.append(
                RequestResult(
                    rid, ttft, duration, 200, backend, None, _gaps(stamps), prefill_backend
                )
            )
    except httpx.HTTPError as exc:
        stats.results.append(RequestResult(rid, ttft, time.monotonic() - start, 0, None, repr(exc)))
    finally:
        stats.in_flight -= 1


async def report_progress(
    label: str, stats: RunStats, total: int, done: asyncio.Event, every_s: float
) -> None:
    """Print `[label] elapsed, done/total, in flight, TTFT p50, errors` to stderr every
    `every_s` until `done` is set (and once more then)."""
    start = time.monotonic()
    while not done.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(done.wait(), every_s)
        p50 = percentile((r.ttft_s for r in stats.results if r.ttft_s is not None), 50)
        print(
            f"  [{label}] {time.monotonic() - start:6.1f}s {len(stats.results):5d}/{total} "
            f"done, {stats.in_flight:3d} in flight, TTFT p50 {p50 * 1000:7.1f} ms, "
            f"{stats.errors} errors",
            file=sys.stderr,
            flush=True,
        )
