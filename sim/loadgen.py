"""Drive multi-turn chats through an OpenAI-compatible endpoint and time every answer.

Each conversation starts at its offset and sends its turns one after another, each turn
carrying the whole history (system prompt, earlier turns and answers), streaming, so the
time to first token is measured as a client sees it.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import httpx
import orjson

from sim.workload import Conversation


@dataclass(slots=True)
class TurnResult:
    conversation: str
    ttft_s: float | None
    duration_s: float
    status: int
    backend: str | None
    error: str | None = None
    itls_s: tuple[float, ...] = ()  # gaps between streamed output chunks


@dataclass(slots=True)
class RunStats:
    results: list[TurnResult] = field(default_factory=list)
    in_flight: int = 0

    @property
    def errors(self) -> int:
        return sum(1 for r in self.results if r.error)


async def run_conversations(
    base_url: str,
    model: str,
    conversations: list[Conversation],
    stats: RunStats,
    headers_for: Callable[[Conversation], dict[str, str]] = lambda c: {},
) -> None:
    limits = httpx.Limits(max_connections=256, max_keepalive_connections=256)
    async with httpx.AsyncClient(base_url=base_url, timeout=120.0, limits=limits) as client:
        t0 = time.monotonic()
        async with asyncio.TaskGroup() as tg:
            for conv in conversations:
                tg.create_task(
                    _conversation(
                        client, model, conv, t0=t0, stats=stats, headers=headers_for(conv)
                    )
                )


async def _conversation(
    client: httpx.AsyncClient,
    model: str,
    conv: Conversation,
    *,
    t0: float,
    stats: RunStats,
    headers: dict[str, str],
) -> None:
    await asyncio.sleep(max(0.0, t0 + conv.start_s - time.monotonic()))
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
            result, answer = await _turn(client, body, conv.id, headers)
        finally:
            stats.in_flight -= 1
        stats.results.append(result)
        if result.error:
            return
        messages.append({"role": "assistant", "content": answer})


async def _turn(
    client: httpx.AsyncClient, body: dict[str, object], conv_id: str, headers: dict[str, str]
) -> tuple[TurnResult, str]:
    start = time.monotonic()
    ttft: float | None = None
    parts: list[str] = []
    stamps: list[float] = []
    try:
        async with client.stream(
            "POST", "/v1/chat/completions", json=body, headers=headers
        ) as resp:
            backend = resp.headers.get("x-kvgate-backend")
            if resp.status_code != 200:
                await resp.aread()
                return TurnResult(
                    conv_id,
                    None,
                    time.monotonic() - start,
                    resp.status_code,
                    backend,
                    resp.text[:200],
                ), ""
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
        return TurnResult(conv_id, ttft, time.monotonic() - start, 0, None, repr(exc)), ""
    result = TurnResult(conv_id, ttft, time.monotonic() - start, 200, backend, None, _gaps(stamps))
    return result, "".join(parts)


def _gaps(stamps: list[float]) -> tuple[float, ...]:
    return tuple(b - a for a, b in itertools.pairwise(stamps))


@dataclass(frozen=True, slots=True)
class TimedRequest:
    """One request of an open-loop replay: sent at `at_s` whatever happened before."""

    at_s: float
    path: str
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)


async def run_timed(base_url: str, requests: list[TimedRequest], stats: RunStats) -> None:
    """Open-loop replay: each request is sent at its time; TTFT measured from the stream."""
    limits = httpx.Limits(max_connections=1024, max_keepalive_connections=256)
    async with httpx.AsyncClient(base_url=base_url, timeout=600.0, limits=limits) as client:
        t0 = time.monotonic()
        async with asyncio.TaskGroup() as tg:
            for i, req in enumerate(requests):
                await asyncio.sleep(max(0.0, t0 + req.at_s - time.monotonic()))
                tg.create_task(_timed(client, req, f"req-{i}", stats))


async def _timed(client: httpx.AsyncClient, req: TimedRequest, rid: str, stats: RunStats) -> None:
    start = time.monotonic()
    ttft: float | None = None
    stats.in_flight += 1
    headers = {"content-type": "application/json", **req.headers}
    try:
        async with client.stream("POST", req.path, content=req.body, headers=headers) as resp:
            backend = resp.headers.get("x-kvgate-backend")
            if resp.status_code != 200:
                text = (await resp.aread())[:200].decode(errors="replace")
                stats.results.append(
                    TurnResult(rid, None, time.monotonic() - start, resp.status_code, backend, text)
                )
                return
            stamps: list[float] = []
            async for line in resp.aiter_lines():
                if line.startswith("data: {") and '"choices":[{' in line:
                    stamps.append(time.monotonic())
                    if ttft is None:
                        ttft = stamps[0] - start
            duration = time.monotonic() - start
            stats.results.append(TurnResult(rid, ttft, duration, 200, backend, None, _gaps(stamps)))
    except httpx.HTTPError as exc:
        stats.results.append(TurnResult(rid, ttft, time.monotonic() - start, 0, None, repr(exc)))
    finally:
        stats.in_flight -= 1


async def progress_ticker(
    label: str, stats: RunStats, total: int, done: asyncio.Event, every_s: float
) -> None:
    """Print `[label] elapsed done/total, in flight, errors` to stderr every `every_s` until
    `done` is set (and once more then)."""
    start = time.monotonic()
    while not done.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(done.wait(), every_s)
        print(
            f"  [{label}] {time.monotonic() - start:6.1f}s {len(stats.results):5d}/{total} "
            f"done, {stats.in_flight:3d} in flight, {stats.errors} errors",
            file=sys.stderr,
            flush=True,
        )
