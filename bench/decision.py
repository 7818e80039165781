"""Microbenchmark of one routing decision, as the gateway makes it for one request.

`python -m bench decision [--out out/bench/decision]` times the steps of
`gateway.router.RequestRouter.route` and `scoring.state.prefix_feed.PrefixFeed.dispatch` on
the stack the gateway and the simulator both build (`scoring.stack`): snapshot (the pool's
snapshots and the healthy candidates), hash (the prompt's chained prefix blocks), schedule
(the default `prefix-aware` profile, prefix lookup included: its compiled pass,
`scoring.fused`, where built), record (the dispatch's bookkeeping) and `decision` = hash +
schedule, for 1k, 8k and 128k tokens over 8, 64 and 512 replicas; then each plugin's median
on the plugins' own path, the pass's reference (`bench.decision_plugins`). Load moves between
decisions (in-flight counts; a scrape round every 25), every replica's TTFT line is learnt,
each cell's index is warm (16 tenants' system prompts and conversations; most queries
continue one, with a fresh tail); `--fill N` makes N untimed decisions first, so that every
replica's tracked cache is full. `perf_counter_ns` per decision, the collector on after a
collect and freeze of the warm state. Writes `decision.json` and `decision.png` to `--out`.
"""

from __future__ import annotations

import argparse
import gc
import math
import platform
import random
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from bench.decision_plugins import plugin_medians, timed_scheduler
from health.pool import BackendPool, BackendSpec
from health.state import HealthPolicy
from routing import EndpointSnapshot, EngineMetrics, RoutingRequest, Scheduler
from routing.config.profiles import RoutingSection
from routing.percentile import percentile
from routing.types import Health
from scoring import fused
from scoring.stack import build_routing_stack
from scoring.state.prefix_hash import hash_blocks, prefix_seed
from scoring.state.prefix_index import PrefixIndex
from sim.plots import PLOTS_SKIPPED, PlotsUnavailable, pyplot

MODEL = "bench-model"
CHARS_PER_TOKEN = 4  # the gateway's default `routing.prefix.chars_per_token`
BLOCK_CHARS = 16 * CHARS_PER_TOKEN  # 16-token engine blocks, the gateway's default
KV_BLOCKS = 16_384  # engine KV blocks of 16 tokens per replica (as in `make bench-routing`)
TENANTS = 16
WARM_ENTRIES = 400_000  # (block, replica) entries recorded before timing, at most
TOKENS = (1_024, 8_192, 131_072)
REPLICAS = (8, 64, 512)
TARGET_US = 100.0  # the target: median of 8k tokens over 64 replicas
SCRAPE_EVERY = 25  # decisions between two rounds of new engine metrics (50 ms at 500/s)


@dataclass(slots=True)
class Cell:
    """One (prompt length, replica count) setting with its warm state."""

    tokens: int
    replicas: int
    scheduler: Scheduler
    index: PrefixIndex
    pool: BackendPool
    scrapes: list[list[EngineMetrics]]  # a few engine-metric situations, used in turn
    systems: list[bytes]  # per tenant
    histories: list[tuple[int, int]]  # recorded conversations: (tenant, text seed)
    noise: bytes  # fresh tail text is cut from here


_PRINTABLE = bytes(32 + b % 95 for b in range(256))


def _text(seed: int, n: int) -> bytes:
    # Printable bytes stand in for rendered chat text; only length and identity matter.
    return random.Random(seed).randbytes(n).translate(_PRINTABLE)


def _metrics(rng: random.Random, replicas: int) -> list[EngineMetrics]:
    return [
        EngineMetrics(
            scraped_at=0.0,
            waiting=rng.choice((0, 0, 0, 1, 2, 4, 7)),
            running=rng.randint(0, 24),
            kv_usage=rng.uniform(0.05, 0.9),
            block_size=16,
            num_blocks=KV_BLOCKS,
        )
        for _ in range(replicas)
    ]


def _pool(rng: random.Random, replicas: int, metrics: list[EngineMetrics]) -> BackendPool:
    specs = [
        BackendSpec(
            url=f"http://10.0.{i // 250}.{i % 250}:8000",
            id=f"replica-{i:03d}",
            engine="vllm",
            models=(MODEL,),
        )
        for i in range(replicas)
    ]
    pool = BackendPool(specs, HealthPolicy(), clock=lambda: 0.0)
    for backend, m in zip(pool, metrics, strict=True):
        backend.state.record_probe(True, 0.0)
        backend.metrics = m
        backend.in_flight = rng.randint(0, 12)
    return pool


def candidates(pool: BackendPool) -> list[EndpointSnapshot]:
    """The snapshots the gateway schedules over: healthy endpoints serving the model."""
    healthy = Health.HEALTHY
    return [e for e in pool.snapshots() if MODEL in e.models and e.health is healthy]


def build_cell(tokens: int, replicas: int, seed: int = 7) -> Cell:
    """The default profile over `replicas` endpoints and an index warmed with their history."""
    rng = random.Random(seed)
    stack = build_routing_stack(RoutingSection(), time.monotonic, random.Random(seed))
    scheduler, index, ttft = stack.scheduler, stack.index, stack.ttft_model
    scrapes = [_metrics(rng, replicas) for _ in range(4)]
    pool = _pool(rng, replicas, scrapes[0])
    n = tokens * CHARS_PER_TOKEN
    systems = [_text(1000 + t, n // 4) for t in range(TENANTS)]
    per_replica = max(2, min(24, WARM_ENTRIES // (replicas * len(_seed_hashes(n)))))
    histories = []
    for r, e in enumerate(pool.snapshots()):
        index.set_capacity(e.id, KV_BLOCKS * 16 * CHARS_PER_TOKEN // BLOCK_CHARS)
        for _ in range(12):  # a live gateway has learned each replica's TTFT line
            work = rng.uniform(200, 8000)
            ttft.observe(e.id, work, (0.02 + 2e-4 * work) * rng.uniform(0.8, 1.25))
        for j in range(per_replica):
            tenant, text_seed = rng.randrange(TENANTS), r * 1000 + j
            data = systems[tenant] + _text(text_seed, n - len(systems[tenant]))
            index.record(e.id, hash_blocks(data, prefix_seed(MODEL), BLOCK_CHARS))
            histories.append((tenant, text_seed))
    noise = _text(9, 2 * n)
    return Cell(tokens, replicas, scheduler, index, pool, scrapes, systems, histories, noise)


def _seed_hashes(n: int) -> tuple[int, ...]:
    return hash_blocks(bytes(n), 0, BLOCK_CHARS)


def queries(cell: Cell, count: int, seed: int = 11) -> list[bytes]:
    """Prompt bytes: 3 in 4 continue a recorded conversation past 3/4 of its length (then
    fresh text), the rest open a conversation under a tenant's system prompt."""
    rng = random.Random(seed)
    n = cell.tokens * CHARS_PER_TOKEN
    out = []
    for i in range(count):
        if rng.random() < 0.75:
            tenant, text_seed = rng.choice(cell.histories)
            system = cell.systems[tenant]
            head = system + _text(text_seed, n - len(system))[: (3 * n) // 4 - len(system)]
        else:
            head = cell.systems[rng.randrange(TENANTS)]
        marker = b"#%d#" % i  # makes every tail, hence every tail block hash, new
        start = rng.randrange(len(cell.noise) // 2)  # leaves at least n bytes
        out.append((head + marker + cell.noise[start:])[:n])
    return out


Stages = tuple[int, int, int, int, int]
# snapshot, hash, schedule, dispatch (wall ns), whole decision (CPU ns)


def decide(cell: Cell, data: bytes) -> Stages:
    """One decision as the gateway makes it: the wall time of each stage and the thread's CPU
    time for the whole, in ns (on a shared machine the CPU time leaves out preemption)."""
    cpu = time.thread_time_ns()
    t0 = time.perf_counter_ns()
    endpoints = candidates(cell.pool)
    t1 = time.perf_counter_ns()
    hashes = hash_blocks(data, prefix_seed(MODEL, None), BLOCK_CHARS)
    t2 = time.perf_counter_ns()
    request = RoutingRequest(
        model=MODEL,
        prefix_hashes=hashes,
        prefix_block_chars=BLOCK_CHARS,
        token_estimate=int(len(data) / CHARS_PER_TOKEN),
    )
    target = cell.scheduler.schedule(request, endpoints).ranked[0]
    t3 = time.perf_counter_ns()
    cell.index.match(hashes, (target,))  # pending-prefill accounting at dispatch
    cell.index.record(target, hashes)
    t4 = time.perf_counter_ns()
    cell.pool.get(target).in_flight += 1
    return t1 - t0, t2 - t1, t3 - t2, t4 - t3, time.thread_time_ns() - cpu


def _live_load(cell: Cell, i: int, rng: random.Random) -> None:
    """Between decisions: a request finishes somewhere, and every SCRAPE_EVERY decisions
    every replica reports new metrics."""
    busy = [b for b in cell.pool if b.in_flight > 0]
    if busy:
        rng.choice(busy).in_flight -= 1
    if i % SCRAPE_EVERY == 0:
        scrape = cell.scrapes[(i // SCRAPE_EVERY) % len(cell.scrapes)]
        for backend, m in zip(cell.pool, scrape, strict=True):
            backend.metrics = m


def time_match(cell: Cell, data: bytes) -> int:
    """The prefix lookup over every candidate alone, as the prefix scorer does it (ns)."""
    hashes = hash_blocks(data, prefix_seed(MODEL, None), BLOCK_CHARS)
    ids = [e.id for e in candidates(cell.pool)]
    t0 = time.perf_counter_ns()
    cell.index.match(hashes, ids)
    return time.perf_counter_ns() - t0


def run_cell(
    cell: Cell,
    iterations: int,
    warmup: int,
    collect: bool = True,
    *,
    seed: int = 11,
    timed: tuple[Scheduler, list[Stages]] | None = None,
) -> list[Stages]:
    """Time `iterations` decisions after `warmup` untimed ones. With `timed` (a scheduler and
    a list), every other decision runs on that scheduler instead and its stages go to the
    list: both halves see the same state as it evolves, as one run of plain ones would."""
    prompts = queries(cell, iterations + warmup, seed)
    gc.collect()
    gc.freeze()  # the warm index is old state, as in a long-running gateway
    if not collect:
        gc.disable()
    rng = random.Random(13)
    plain = cell.scheduler
    try:
        out: list[Stages] = []
        for i, data in enumerate(prompts):
            _live_load(cell, i, rng)
            other = timed is not None and i % 2 == 1
            if timed is not None and other:
                cell.scheduler = timed[0]
            stages = decide(cell, data)
            cell.scheduler = plain
            if i >= warmup:
                (timed[1] if timed is not None and other else out).append(stages)
        return out
    finally:
        cell.scheduler = plain
        gc.enable()
        gc.unfreeze()


def percentiles_us(ns: list[int], prefix: str = "") -> dict[str, float]:
    """Median, p90 and p99 of nanosecond timings, in µs (nearest rank, `routing.percentile`)."""
    return {
        f"{prefix}median_us": percentile(ns, 50) / 1000,
        f"{prefix}p90_us": percentile(ns, 90) / 1000,
        f"{prefix}p99_us": percentile(ns, 99) / 1000,
    }


def breakdown(cell: Cell, iterations: int) -> dict[str, float]:
    """Median of each stage; `match` is timed in separate calls on the same prompts."""
    runs = run_cell(cell, iterations, warmup=20)
    matches = [time_match(cell, data) for data in queries(cell, iterations, seed=12)]
    med = [percentile((s[k] for s in runs), 50) / 1000 for k in range(4)]
    match = percentile(matches, 50) / 1000
    return {
        "snapshot_us": med[0],
        "hash_us": med[1],
        "match_us": match,
        "score_us": med[2] - match,  # filters, scorers and picker, the lookup taken out
        "schedule_us": med[2],
        "record_us": med[3],
    }


def calibrate() -> float:
    """A fixed pure-Python workload (ms, best of 5): how fast this machine is right now, to
    compare runs made on different machines or under different load."""
    best = math.inf
    for _ in range(5):
        t0 = time.perf_counter_ns()
        sum(i * i for i in range(200_000))
        best = min(best, (time.perf_counter_ns() - t0) / 1e6)
    return best


def iterations_for(tokens: int, replicas: int, scale: float) -> int:
    base = 3000 if tokens <= 8_192 else 300
    return max(50, int(base * scale * (64 / max(64, replicas)) ** 0.5))


def _short(name: str) -> str:
    return name.removesuffix("-scorer").removesuffix("-filter").removesuffix("-picker")


def run(args: argparse.Namespace, say: Callable[[str], None]) -> dict[str, Any]:
    rows = []
    say(
        f"{'tokens':>8} {'replicas':>8} {'n':>6} {'median µs':>10} {'p90 µs':>9} {'p99 µs':>9}"
        f" {'CPU median':>10} {'CPU p99':>9} {'snapshot':>8} {'hash':>7} {'schedule':>8}"
        f" {'record':>7} {'decision':>8} {'dec. p99':>8}"
    )
    cells = [(t, r) for t in args.tokens for r in args.replicas]
    for i, (tokens, replicas) in enumerate(cells, 1):
        print(f"[{i}/{len(cells)}] {tokens} tokens × {replicas} replicas …", file=sys.stderr)
        cell = build_cell(tokens, replicas)
        if args.fill:  # untimed decisions first: every replica's tracked cache fills up
            run_cell(cell, args.fill, 0, seed=23)
        n = iterations_for(tokens, replicas, args.scale)
        # Every other decision on the same plugins behind timers (`bench.decision_plugins`).
        timed, times = timed_scheduler(cell.scheduler)
        timed_runs: list[Stages] = []
        warmup = 2 * max(5, n // 40)  # even: as many of each kind
        runs = run_cell(cell, n, warmup, collect=args.gc, timed=(timed, timed_runs))
        row: dict[str, Any] = {"tokens": tokens, "replicas": replicas, "iterations": n}
        row.update(percentiles_us([sum(s[:4]) for s in runs]))
        row.update(percentiles_us([s[4] for s in runs], "cpu_"))
        for k, stage in enumerate(("snapshot", "hash", "schedule", "record")):
            row[f"{stage}_median_us"] = percentile((s[k] for s in runs), 50) / 1000
        row.update(percentiles_us([s[1] + s[2] for s in runs], "decision_"))
        schedule = [s[2] for s in timed_runs]
        row["plugins_median_us"] = plugin_medians(times, schedule, warmup // 2)
        rows.append(row)
        say(
            f"{tokens:>8} {replicas:>8} {n:>6} {row['median_us']:>10.1f} "
            f"{row['p90_us']:>9.1f} {row['p99_us']:>9.1f} "
            f"{row['cpu_median_us']:>10.1f} {row['cpu_p99_us']:>9.1f} "
            f"{row['snapshot_median_us']:>8.1f} {row['hash_median_us']:>7.1f} "
            f"{row['schedule_median_us']:>8.1f} "
            f"{row['record_median_us']:>7.1f} {row['decision_median_us']:>8.1f}"
            f" {row['decision_p99_us']:>8.1f}"
        )
        del cell
    _plugin_table(rows, say)
    say(f"calibration: {calibrate():.1f} ms for a fixed pure-Python loop (lower is faster)")
    parts = breakdown(build_cell(8_192, 64), iterations_for(8_192, 64, args.scale))
    say("8k tokens x 64 replicas, medians: " + ", ".join(f"{k} {v:.1f}" for k, v in parts.items()))
    return {
        "python": sys.version.split()[0],
        "machine": platform.machine(),
        "block_chars": BLOCK_CHARS,
        "gc": "enabled" if args.gc else "disabled while timing",
        "fill": args.fill,
        "calibration_ms": calibrate(),
        "compiled_pass": fused.compiled(),  # the default profile's (`scoring.fused`)
        "target_us": TARGET_US,
        "cells": rows,
        "breakdown_8k_64": parts,
    }


def _plugin_table(rows: list[dict[str, Any]], say: Callable[[str], None]) -> None:
    names = list(rows[0]["plugins_median_us"]) if rows else []
    say(
        "per plugin on the plugins' own path, median µs (every other decision; the others take"
        " the compiled pass; `scheduler`: its schedule less these)"
    )
    say(f"{'tokens':>8} {'replicas':>8} " + " ".join(f"{_short(n):>13}" for n in names))
    for row in rows:
        parts = row["plugins_median_us"]
        cells = " ".join(f"{parts.get(n, math.nan):>13.1f}" for n in names)
        say(f"{row['tokens']:>8} {row['replicas']:>8} {cells}")


def write_plot(result: dict[str, Any], path: Path) -> None:
    plt = pyplot()
    from matplotlib.ticker import ScalarFormatter

    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    tokens = sorted({r["tokens"] for r in result["cells"]})
    for k, t in enumerate(tokens):
        rows = [r for r in result["cells"] if r["tokens"] == t]
        xs = [r["replicas"] for r in rows]
        label = f"{t // 1024}k tokens"
        ax.plot(xs, [r["median_us"] for r in rows], "o-", color=f"C{k}", label=f"{label}, median")
        ax.plot(xs, [r["p99_us"] for r in rows], "x--", color=f"C{k}", label=f"{label}, p99")
    ax.axhline(result["target_us"], color="grey", lw=0.8, ls=":", label="100 µs target (8k×64)")
    ax.set_xscale("log", base=2)
    ax.set_xticks(sorted({r["replicas"] for r in result["cells"]}))
    ax.xaxis.set_major_formatter(ScalarFormatter())
    ax.set_yscale("log")
    ax.set_xlabel("replicas")
    ax.set_ylabel("one routing decision (µs, log)")
    ax.set_title("prefix-aware decision: snapshot + hash + schedule + record")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench decision", description=__doc__)
    parser.add_argument("--out", type=Path, default=Path("out/bench/decision"))
    parser.add_argument("--tokens", type=int, nargs="+", default=list(TOKENS))
    parser.add_argument("--replicas", type=int, nargs="+", default=list(REPLICAS))
    parser.add_argument("--scale", type=float, default=1.0, help="multiply the iterations")
    parser.add_argument(
        "--fill",
        type=int,
        default=0,
        metavar="N",
        help="make N untimed decisions per cell first, so that the replicas' tracked caches are"
        " full and evictions (the displacement term) count (default 0)",
    )
    parser.add_argument(
        "--no-gc", dest="gc", action="store_false", help="disable the collector while timing"
    )
    args = parser.parse_args(argv)
    result = run(args, lambda line: print(line, flush=True))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "decision.json").write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2))
    print(f"wrote {args.out}/decision.json")
    try:
        write_plot(result, args.out / "decision.png")
    except PlotsUnavailable:
        print(PLOTS_SKIPPED)
    else:
        print(f"wrote {args.out}/decision.png")


if __name__ == "__main__":
    main()
