"""The bench's client: streamed completions, one tenant header each, timed as a client sees them.

Three shapes: `sequential` (one request at a time: the unloaded figures), `closed_loop` (N
clients back to back for a while: the fleet's throughput at its admission capacity) and
`open_loop` (requests at fixed times whatever happens: the burst). Each prompt is fresh text,
so no request is cheaper for a cached prefix, and each asks for a length drawn uniformly
from half to one and a half times `output_tokens`: with one length for all, requests admitted
together finish together, and the fleet frees its places in waves no real traffic makes.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Iterator
from dataclasses import dataclass

import httpx

from sim.workloads import synth_text

TENANT_HEADER = "x-tenant"
_LIMITS = httpx.Limits(max_connections=2048, max_keepalive_connections=512)


@dataclass(frozen=True, slots=True)
class Shot:
    """One request as the client saw it (`ttft_s` None unless it streamed a token)."""

    tenant: str
    sent_s: float  # since the phase started
    status: int
    ttft_s: float | None
    duration_s: float
    retry_after_s: int | None


@dataclass(frozen=True, slots=True)
class Workload:
    """What every request asks for."""

    model: str
    prompt_tokens: int
    output_tokens: int
    seed: int = 0


@dataclass(frozen=True, slots=True)
class _Ask:
    prompt: str
    max_tokens: int


def _asks(w: Workload) -> Iterator[_Ask]:
    rng = random.Random(w.seed)
    low, high = max(1, w.output_tokens // 2), max(1, w.output_tokens * 3 // 2)
    while True:
        yield _Ask(synth_text(rng, w.prompt_tokens), rng.randint(low, high))


async def _shot(client: httpx.AsyncClient, w: Workload, tenant: str, ask: _Ask, t0: float) -> Shot:
    body = {"model": w.model, "prompt": ask.prompt, "max_tokens": ask.max_tokens, "stream": True}
    start = time.monotonic()
    ttft = None
    try:
        async with client.stream(
            "POST", "/v1/completions", json=body, headers={TENANT_HEADER: tenant}
        ) as r:
            async for line in r.aiter_lines():
                if ttft is None and line.startswith("data: {"):
                    ttft = time.monotonic() - start
            status = r.status_code
            retry = r.headers.get("retry-after")
    except httpx.HTTPError:
        status, retry = 0, None
    return Shot(
        tenant,
        start - t0,
        status,
        ttft if status == 200 else None,
        time.monotonic() - start,
        int(retry) if retry and retry.isdigit() else None,
    )


async def sequential(url: str, w: Workload, count: int, tenant: str = "probe") -> list[Shot]:
    asks = _asks(w)
    async with httpx.AsyncClient(base_url=url, timeout=120.0) as client:
        t0 = time.monotonic()
        return [await _shot(client, w, tenant, next(asks), t0) for _ in range(count)]


async def closed_loop(url: str, w: Workload, clients: int, duration_s: float) -> list[Shot]:
    """`clients` clients, each sending its next request when its last one ended."""
    asks = _asks(w)
    shots: list[Shot] = []
    async with httpx.AsyncClient(base_url=url, timeout=120.0, limits=_LIMITS) as client:
        t0 = time.monotonic()

        async def one() -> None:
            while time.monotonic() - t0 < duration_s:
                shots.append(await _shot(client, w, "probe", next(asks), t0))

        await asyncio.gather(*(one() for _ in range(clients)))
    return shots


def burst_schedule(
    rate: float, duration_s: float, weights: dict[str, float], seed: int
) -> list[tuple[float, str]]:
    """Arrivals at `rate` per second, evenly spaced, each a tenant drawn by `weights`."""
    rng = random.Random(seed)
    names, shares = list(weights), list(weights.values())
    count = round(rate * duration_s)
    return [(i / rate, rng.choices(names, shares)[0]) for i in range(count)]


async def open_loop(url: str, w: Workload, schedule: list[tuple[float, str]]) -> list[Shot]:
    asks = _asks(w)
    async with httpx.AsyncClient(base_url=url, timeout=120.0, limits=_LIMITS) as client:
        t0 = time.monotonic()
        tasks = []
        for at, tenant in schedule:
            await asyncio.sleep(max(0.0, t0 + at - time.monotonic()))
            tasks.append(asyncio.ensure_future(_shot(client, w, tenant, next(asks), t0)))
        return list(await asyncio.gather(*tasks))
