"""`python -m bench shared-state`: how stale one gateway's view of another's is, and its cost.

Gateways A and B (`SharedState`, as `kvgate serve` wires it) run in two processes, sharing
through `--channel redis` (a `redis-server` this benchmark starts) or `--channel workers` (the
Unix-socket channel of `kvgate serve --workers N`). A notes `--dispatches` placements of
`--blocks` block hashes each at `--rate` per second, its in-flight count on one backend
changing with each. Measured at B (wall clock, one machine):

- event lag: from A's dispatch to B's index holding its blocks, p50/p90/p99/max;
- load staleness: from A's in-flight count changing to B showing it or a later one, and the
  share of A's counts B saw (reports coalesce changes closer than the interval);
- with Redis, memory (the stream's `MEMORY USAGE`, `used_memory` growth over
  `--memory-entries` more placements, per placement and per block) and what noting a dispatch
  costs on the request path (µs). Prints one JSON object.
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

from gateway.state.load import Counts
from gateway.state.shared import SharedState
from gateway.supervisor import Supervisor
from gateway.workers.context import WorkerContext
from gateway.workers.siblings import Siblings
from routing.config.schema import StateSection
from routing.percentile import percentile
from routing.types import RoutingRequest
from scoring.state.prefix_index import PrefixIndex
from sim.live.processes import start_redis

BLOCK_CHARS = 64
BACKENDS = ("b1", "b2", "b3", "b4")


def _shared(
    channel: str,
    where: str,
    name: str,
    index: PrefixIndex,
    *,
    local: Callable[[], Counts] = dict,
    on_remote: Callable[[Counts], None] = lambda remote: None,
) -> tuple[SharedState, Siblings | None]:
    """`where`: the Redis URL, or the workers' run directory."""
    siblings = None
    if channel == "workers":
        ctx = WorkerContext(0 if name == "A" else 1, 2, Path(where), ready_fd=-1)
        siblings = Siblings(ctx, lambda f: shared.receive_local(f), _no_requests)  # noqa: PLW0108
        section = StateSection()
    else:
        section = StateSection(backend="redis", url=where, namespace="bench")
    shared = SharedState(
        section,
        "static",
        index,
        lambda: BLOCK_CHARS,
        lambda b: True,
        local_load=local,
        on_remote_load=on_remote,
        siblings=siblings,
        gateway_id=name,
    )
    return shared, siblings


async def _no_requests(request: dict[str, Any]) -> dict[str, Any]:
    return {"error": "no requests here"}


async def _run(
    shared: SharedState, siblings: Siblings | None
) -> tuple[Supervisor, asyncio.Task[None]]:
    loops = Supervisor()
    shared.attach(loops)
    if siblings is not None:
        loops.add("workers", siblings.serve)
    return loops, asyncio.create_task(loops.run())


def _reader(channel: str, where: str, expected: int, conn: Connection) -> None:
    """Gateway B (child process): apply until `expected` placements are in, send the lags."""
    seen: list[tuple[int, float]] = []  # (A's in-flight count, when B saw it)

    def on_remote(remote: Counts) -> None:
        seen.append((remote.get("b1", (0, 0))[0], time.time()))

    async def run() -> dict[str, Any]:
        shared, siblings = _shared(channel, where, "B", PrefixIndex(1 << 22), on_remote=on_remote)
        _, task = await _run(shared, siblings)
        await _until(lambda: shared.settled and (siblings is None or siblings.listening))
        conn.send("ready")
        c = shared.counters
        await _until(lambda: c.applied >= expected, within=120)
        await asyncio.sleep(0.2)  # the last load report
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await shared.aclose()
        return {"applied": c.applied, "lags": list(shared.mirror.lags_ms), "seen": seen}

    conn.send(asyncio.run(run()))


async def _writer(channel: str, where: str, args: argparse.Namespace) -> dict[str, Any]:
    rng = random.Random(args.seed)
    state = {"in_flight": 0}
    changed: list[float] = []  # when A's count became k (index k - 1)
    shared, siblings = _shared(
        channel, where, "A", PrefixIndex(1 << 22), local=lambda: {"b1": (state["in_flight"], 0)}
    )
    _, task = await _run(shared, siblings)
    if siblings is not None:
        await _until(lambda: siblings.connected == [1], within=10)
    start = time.monotonic()
    for i in range(args.dispatches):
        await asyncio.sleep(max(0.0, start + i / args.rate - time.monotonic()))
        hashes = tuple(rng.getrandbits(64) for _ in range(args.blocks))
        request = RoutingRequest(model="m", prefix_hashes=hashes, prefix_block_chars=BLOCK_CHARS)
        shared.placed(rng.choice(BACKENDS), request, args.blocks * 16)
        state["in_flight"] += 1
        changed.append(time.time())
    c = shared.counters
    await _until(lambda: c.published >= args.dispatches)
    await asyncio.sleep(0.5)  # the last load report out
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    await shared.aclose()
    return {"published": c.published, "changed": changed}


async def _memory(url: str, args: argparse.Namespace) -> dict[str, Any]:
    """Stream bytes per placement and per block after `memory_entries` placements."""
    r = Redis.from_url(url)
    rng = random.Random(args.seed + 1)
    shared, _ = _shared("redis", url, "M", PrefixIndex())
    assert shared.stream is not None
    key = shared.stream.stream = "bench:memory:events"
    before = (await r.info("memory"))["used_memory"]
    loops = Supervisor()
    loops.add("publish", shared.stream.publish)
    task = asyncio.create_task(loops.run())
    n = args.memory_entries
    c = shared.counters
    for _ in range(n):
        hashes = tuple(rng.getrandbits(64) for _ in range(args.blocks))
        request = RoutingRequest(model="m", prefix_hashes=hashes, prefix_block_chars=BLOCK_CHARS)
        shared.placed(rng.choice(BACKENDS), request, args.blocks * 16)
        await _until(lambda: c.queued - c.published <= 1000)  # within the queue's bound
    await _until(lambda: c.published + c.dropped >= n)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    entries = await r.xlen(key)
    usage = await r.memory_usage(key, samples=0) or 0
    after = (await r.info("memory"))["used_memory"]
    await r.aclose()
    await shared.aclose()
    placements = c.published  # entries hold batches of them
    blocks = placements * args.blocks
    return {
        "entries": entries,
        "placements": placements,
        "blocks_per_placement": args.blocks,
        "stream_bytes": usage,
        "bytes_per_placement": round(usage / placements, 1),
        "bytes_per_block": round(usage / blocks, 2),
        "used_memory_growth_per_block": round((after - before) / blocks, 2),
        "dropped": c.dropped,
    }


async def _until(condition: Callable[[], bool], within: float = 60.0) -> None:
    """Poll counters another task (or process) moves; TimeoutError after `within` s."""
    async with asyncio.timeout(within):
        while not condition():  # noqa: ASYNC110 (no event to wait on: plain counters)
            await asyncio.sleep(0.001)


def _note_cost(args: argparse.Namespace) -> dict[str, float]:
    """What noting a dispatch adds to a request (no I/O: it only queues), in µs."""
    shared, _ = _shared("redis", "redis://127.0.0.1:1/0", "N", PrefixIndex())
    rng = random.Random(args.seed + 2)
    requests = [
        RoutingRequest(
            model="m",
            prefix_hashes=tuple(rng.getrandbits(64) for _ in range(args.blocks)),
            prefix_block_chars=BLOCK_CHARS,
        )
        for _ in range(1000)
    ]
    times = []
    for i in range(20_000):
        if i % 5000 == 0:
            shared.outbox.take(10_000)  # keep the queue below its bound, as the sender would
        t0 = time.perf_counter_ns()
        shared.placed("b1", requests[i % 1000], 512)
        times.append((time.perf_counter_ns() - t0) / 1000)
    return {
        "p50": _pct(times, 50),
        "p99": _pct(times, 99),
        "mean": round(statistics.fmean(times), 2),
    }


def _pct(values: list[float], p: float) -> float:
    return round(percentile(values, p), 2)  # the project's one rule: nearest rank


def _summary(values: list[float]) -> dict[str, float]:
    return {
        "n": len(values),
        "p50": _pct(values, 50),
        "p90": _pct(values, 90),
        "p99": _pct(values, 99),
        "max": round(max(values), 2),
        "mean": round(statistics.fmean(values), 2),
    }


def _staleness(changed: list[float], seen: list[tuple[int, float]]) -> dict[str, Any]:
    """For each count k A reached: how long until B's view of A showed k or a later count (ms);
    the share of counts B saw as such (reports coalesce changes closer than the interval)."""
    ages, j, exact = [], 0, 0
    seen_counts = {k for k, _ in seen}
    for k, at in enumerate(changed, start=1):
        while j < len(seen) and seen[j][0] < k:
            j += 1
        if j < len(seen):
            ages.append((seen[j][1] - at) * 1000)
        exact += k in seen_counts
    return {**_summary(ages), "seen_share": round(exact / len(changed), 3)}


def _measure(channel: str, where: str, args: argparse.Namespace) -> dict[str, Any]:
    parent, child = mp.get_context("spawn").Pipe()
    reader = mp.get_context("spawn").Process(
        target=_reader, args=(channel, where, args.dispatches, child)
    )
    reader.start()
    assert parent.recv() == "ready"
    writer = asyncio.run(_writer(channel, where, args))
    got = parent.recv()
    reader.join(timeout=10)
    return {
        "published": writer["published"],
        "applied": got["applied"],
        "event_lag_ms": _summary(got["lags"]),
        "load_staleness_ms": _staleness(writer["changed"], got["seen"]),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench shared-state", description=__doc__)
    parser.add_argument("--channel", choices=["redis", "workers"], default="redis")
    parser.add_argument("--dispatches", type=int, default=500)
    parser.add_argument("--rate", type=float, default=200.0, help="dispatches per second")
    parser.add_argument("--blocks", type=int, default=32, help="block hashes per placement")
    parser.add_argument("--memory-entries", type=int, default=100_000, help="0: skip")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    result: dict[str, Any] = {"params": vars(args)}
    if args.channel == "workers":
        with tempfile.TemporaryDirectory(prefix="kvgate-bench-workers-") as where:
            result |= _measure("workers", where, args)
    else:
        proc, url = start_redis(Path(tempfile.gettempdir()) / "kvgate-bench-redis.log")
        try:
            result |= _measure("redis", url, args)
            if args.memory_entries:
                result["memory"] = asyncio.run(_memory(url, args))
        finally:
            proc.stop()
    result["note_dispatch_us"] = _note_cost(args)
    json.dump(result, sys.stdout, indent=2)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
