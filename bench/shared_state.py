"""`python -m bench shared-state`: replication lag between two gateways' shared state, and
the Redis memory each tracked block costs.

Starts its own `redis-server` on a free port (no persistence). Gateway A's and gateway B's
`SharedState` (the objects `kvgate serve --redis` wires) run in two processes. A notes
`--dispatches` placements of `--blocks` block hashes each at `--rate` per second, as its
prefix tracker does on each dispatch; B records the ones it reads into its own
`PrefixIndex`. Lag: from A's `note` to B's index holding the blocks (wall clock, one
machine), p50/p90/p99/max over the dispatches. Memory: the stream's `MEMORY USAGE` and the
server's `used_memory` growth after `--memory-entries` more placements, per placement and
per tracked block. And what `note_dispatch` costs on the request path (µs). Prints one JSON
object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from redis.asyncio import Redis

from gateway.state.shared import SharedState
from gateway.supervisor import Supervisor
from routing.types import RoutingRequest
from scoring.config import StateSection
from scoring.prefix_index import PrefixIndex
from sim.live.processes import start_redis
from sim.percentile import percentile

BLOCK_CHARS = 64
BACKENDS = ("b1", "b2", "b3", "b4")


def _section(url: str) -> StateSection:
    return StateSection(backend="redis", url=url, namespace="bench")


def _shared(url: str, name: str, index: PrefixIndex) -> SharedState:
    return SharedState(
        _section(url), "static", index, lambda: BLOCK_CHARS, lambda b: True, gateway_id=name
    )


def _reader(url: str, expected: int, conn: Connection) -> None:
    """Gateway B (child process): apply until `expected` placements are in, send the lags."""

    async def run() -> dict[str, Any]:
        shared = _shared(url, "B", PrefixIndex(1 << 22))
        loops = Supervisor()
        shared.attach(loops)
        task = asyncio.create_task(loops.run())
        assert shared.placements is not None
        p = shared.placements
        await _until(lambda: p.warmed)
        conn.send("ready")
        await _until(lambda: p.counters.applied >= expected, within=120)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await shared.aclose()
        c = shared.placements.counters
        return {"applied": c.applied, "lags": list(shared.placements.lags_ms)}

    conn.send(asyncio.run(run()))


async def _writer(url: str, args: argparse.Namespace) -> dict[str, Any]:
    rng = random.Random(args.seed)
    shared = _shared(url, "A", PrefixIndex(1 << 22))
    loops = Supervisor()
    shared.attach(loops)
    task = asyncio.create_task(loops.run())
    start = time.monotonic()
    for i in range(args.dispatches):
        await asyncio.sleep(max(0.0, start + i / args.rate - time.monotonic()))
        hashes = tuple(rng.getrandbits(64) for _ in range(args.blocks))
        request = RoutingRequest(model="m", prefix_hashes=hashes, prefix_block_chars=BLOCK_CHARS)
        shared.note_dispatch(rng.choice(BACKENDS), request)
    assert shared.placements is not None
    p = shared.placements
    await _until(lambda: p.counters.published >= args.dispatches)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    await shared.aclose()
    return {"published": shared.placements.counters.published}


async def _memory(url: str, args: argparse.Namespace) -> dict[str, Any]:
    """Stream bytes per placement and per block after `memory_entries` placements."""
    r = Redis.from_url(url)
    rng = random.Random(args.seed + 1)
    key = "bench:memory:placements"
    shared = _shared(url, "M", PrefixIndex())
    assert shared.placements is not None
    shared.placements.stream = key
    before = (await r.info("memory"))["used_memory"]
    loops = Supervisor()
    loops.add("publish", shared.placements.publish)
    task = asyncio.create_task(loops.run())
    n = args.memory_entries
    c = shared.placements.counters
    for _ in range(n):
        hashes = tuple(rng.getrandbits(64) for _ in range(args.blocks))
        shared.note_dispatch(rng.choice(BACKENDS), RoutingRequest(model="m", prefix_hashes=hashes))
        await _until(lambda: c.queued - c.published <= 1000)  # within the queue's bound
    await _until(lambda: c.published + c.dropped >= n)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    entries = await r.xlen(key)
    usage = await r.memory_usage(key, samples=0) or 0
    after = (await r.info("memory"))["used_memory"]
    await r.aclose()
    await shared.aclose()
    blocks = entries * args.blocks
    return {
        "entries": entries,
        "blocks_per_entry": args.blocks,
        "stream_bytes": usage,
        "bytes_per_entry": round(usage / entries, 1),
        "bytes_per_block": round(usage / blocks, 2),
        "used_memory_growth_per_block": round((after - before) / blocks, 2),
        "dropped": shared.placements.counters.dropped,
    }


async def _until(condition: Callable[[], bool], within: float = 60.0) -> None:
    """Poll counters another task (or process) moves; TimeoutError after `within` s."""
    async with asyncio.timeout(within):
        while not condition():  # noqa: ASYNC110 (no event to wait on: plain counters)
            await asyncio.sleep(0.001)


def _note_cost(args: argparse.Namespace) -> dict[str, float]:
    """What `note_dispatch` adds to a request (no Redis involved: it only queues), in µs."""
    shared = _shared("redis://127.0.0.1:1/0", "N", PrefixIndex())
    rng = random.Random(args.seed + 2)
    requests = [
        RoutingRequest(
            model="m", prefix_hashes=tuple(rng.getrandbits(64) for _ in range(args.blocks))
        )
        for _ in range(1000)
    ]
    times = []
    for i in range(20_000):
        t0 = time.perf_counter_ns()
        shared.note_dispatch("b1", requests[i % 1000])
        times.append((time.perf_counter_ns() - t0) / 1000)
    return {
        "p50": _pct(times, 50),
        "p99": _pct(times, 99),
        "mean": round(statistics.fmean(times), 2),
    }


def _pct(values: list[float], p: float) -> float:
    return round(percentile(values, p), 2)  # the project's one rule: nearest rank


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench shared-state", description=__doc__)
    parser.add_argument("--dispatches", type=int, default=500)
    parser.add_argument("--rate", type=float, default=200.0, help="dispatches per second")
    parser.add_argument("--blocks", type=int, default=32, help="block hashes per placement")
    parser.add_argument("--memory-entries", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    proc, url = start_redis(Path(tempfile.gettempdir()) / "kvgate-bench-redis.log")
    try:
        parent, child = mp.get_context("spawn").Pipe()
        reader = mp.get_context("spawn").Process(target=_reader, args=(url, args.dispatches, child))
        reader.start()
        assert parent.recv() == "ready"
        writer = asyncio.run(_writer(url, args))
        got = parent.recv()
        reader.join(timeout=10)
        lags = got["lags"]
        result: dict[str, Any] = {"params": vars(args), "writer": writer, "applied": got["applied"]}
        result["lag_ms"] = {
            "n": len(lags),
            "p50": _pct(lags, 50),
            "p90": _pct(lags, 90),
            "p99": _pct(lags, 99),
            "max": round(max(lags), 2),
            "mean": round(statistics.fmean(lags), 2),
        }
        result["memory"] = asyncio.run(_memory(url, args))
        result["note_dispatch_us"] = _note_cost(args)
    finally:
        proc.stop()
    json.dump(result, sys.stdout, indent=2)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
