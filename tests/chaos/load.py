"""Streaming load through the gateway, and what each request looked like to its client.

A request "started" when the client got a 200 head; one that ended otherwise before that
(a 5xx, a reset) is *lost before streaming* — the failover's job was to prevent it. A started
stream that did not finish with ``[DONE]`` must end with a *well-formed* SSE error event:
every ``data:`` event of the stream parses as JSON (or is ``[DONE]``) and the last one is
``{"error": {...}}``; half an event glued to an error is not well-formed.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

import httpx
import orjson

from routing.percentile import percentile

CHAT = {"model": "m1", "messages": [{"role": "user", "content": "hello there, how are you"}]}


@dataclass(frozen=True, slots=True)
class StreamVerdict:
    """How a stream body parses, event by event."""

    events: int
    well_formed: bool  # every data event is JSON or [DONE]
    done: bool  # ended with data: [DONE]
    error_event: bool  # the last data event is an OpenAI-shaped error


def judge_stream(body: bytes) -> StreamVerdict:
    """Split an SSE body on blank lines and parse every ``data:`` event."""
    text = body.replace(b"\r\n", b"\n")
    datas: list[bytes] = []
    for event in text.split(b"\n\n"):
        lines = [line[5:].strip() for line in event.split(b"\n") if line.startswith(b"data:")]
        if lines:
            datas.append(b"\n".join(lines))
        elif event.strip() and not all(
            line.startswith((b":", b"event:", b"id:", b"retry:")) for line in event.split(b"\n")
        ):
            datas.append(event)  # bytes outside any data field: not well-formed
    parsed: list[object] = []
    well_formed = True
    for data in datas:
        if data == b"[DONE]":
            parsed.append("[DONE]")
            continue
        try:
            parsed.append(orjson.loads(data))
        except orjson.JSONDecodeError:
            well_formed = False
    last = parsed[-1] if parsed else None
    error = isinstance(last, dict) and isinstance(last.get("error"), dict)
    return StreamVerdict(len(datas), well_formed, last == "[DONE]", error)


@dataclass(frozen=True, slots=True)
class Attempt:
    """One request of the load, as its client saw it."""

    started_at: float
    latency_s: float
    status: int | None  # None: no response head (transport error)
    verdict: StreamVerdict | None

    @property
    def ok(self) -> bool:
        return self.status == 200 and self.verdict is not None and self.verdict.done

    @property
    def lost_before_streaming(self) -> bool:
        return self.status != 200

    @property
    def cut_after_start(self) -> bool:
        return self.status == 200 and not self.ok


async def _one(client: httpx.AsyncClient, body: dict[str, object]) -> Attempt:
    t0 = time.monotonic()
    status: int | None = None
    chunks: list[bytes] = []
    try:
        async with client.stream("POST", "/v1/chat/completions", json=body) as resp:
            status = resp.status_code
            async for part in resp.aiter_raw():
                chunks.append(part)
    except httpx.HTTPError:
        pass  # a cut stream or no answer: judged below from what arrived
    verdict = judge_stream(b"".join(chunks)) if status == 200 else None
    return Attempt(t0, time.monotonic() - t0, status, verdict)


async def run_load(
    url: str,
    seconds: float,
    concurrency: int,
    max_tokens: int = 40,
    request_timeout_s: float = 30.0,
) -> list[Attempt]:
    """``concurrency`` clients streaming chat completions back to back for ``seconds``."""
    body = {**CHAT, "stream": True, "max_tokens": max_tokens}
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    attempts: list[Attempt] = []
    stop = time.monotonic() + seconds

    async def worker(client: httpx.AsyncClient) -> None:
        while time.monotonic() < stop:
            attempts.append(await _one(client, body))

    async with httpx.AsyncClient(base_url=url, timeout=request_timeout_s, limits=limits) as client:
        await asyncio.gather(*(worker(client) for _ in range(concurrency)))
    return attempts


def p99(attempts: list[Attempt]) -> float | None:
    values = [a.latency_s for a in attempts if a.status is not None]
    return round(percentile(values, 99), 3) if values else None
