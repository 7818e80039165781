"""`python -m bench pd`: kvgate on disaggregated prefill/decode pools, against peers' P/D modes.

Fresh `kvgate emulate` fleets on the `demo` profile at `--speedup`: 2 prefill + 2 decode
replicas (vLLM's or SGLang's protocol) or 4 of role both. A: multi-tenant chats (8 tenants,
1,500-token system prompts, 2–6 turns) open loop at `--loads` × the capacity a closed-loop
probe measures through kvgate P/D (or `--capacity`), through kvgate P/D (vLLM fleet,
conditional), vllm-router's and sglang-router's P/D modes, kvgate P/D on the SGLang fleet and
kvgate aggregated. B: 70 % short, 30 % long (3–4k-token) prompts at `--b-load` × the decode
pair's prefill rate, kvgate in modes conditional, always and never, live and simulated on the
same trace. Cells repeat `--repeats` times (own seed, routers' order rotated). Per run: TTFT
and ITL, errors, throughput, P's share, moved tokens, P's and D's engine TTFT, kvgate's P/D
decisions, fallbacks and decode legs. Writes OUT/pd.json (rows, means ± sd over repeats,
ratios, targets), OUT/pd_ttft.png and OUT/pd_modes.png; prints the tables. docs/benchmarks.md
has the latest figures.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import orjson

from bench.pd import report, simulate
from bench.pd.live import FleetSpec, LiveRun, RouterSpec, pd_figures, run
from bench.pd.workloads import (
    MODEL,
    chat_requests,
    conversations_for,
    is_long,
    mixed_trace,
    prefill_capacity_rps,
    steady_rate,
    tenant_chats,
)
from bench.peers import PeerInstall, ensure_peer
from routing.percentile import percentile
from routing.traces import TraceRequest
from sim.engine.profiles import get_profile
from sim.live.client import Fronts, RunStats
from sim.live.experiment import Send, Workload, closed_loop, open_loop
from sim.traces import time_scaled
from sim.workloads import family, timed_requests

PROFILE = "demo"
PREFILL, DECODE = 2, 2
PROBE_CLIENTS = 32
THINK_MODEL_S = 1.0  # a chat's mean gap between turns, in model seconds
ROUTERS_A = (
    RouterSpec("kvgate-pd", "kvgate", "vllm", "conditional"),
    RouterSpec("vllm-router-pd", "vllm-router", "vllm"),
    RouterSpec("sglang-router-pd", "sglang-router", "sglang"),
    RouterSpec("kvgate-pd-sglang", "kvgate", "sglang", "conditional"),
    RouterSpec("kvgate-agg", "kvgate", "aggregated"),
)
MODES_B = tuple(RouterSpec(m, "kvgate", "vllm", m) for m in ("conditional", "always", "never"))


class Bench:
    """One invocation: settings, installed routers, the rows so far, progress."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.out = Path(args.out)
        names = dict.fromkeys(s.router for s in ROUTERS_A)
        self.installs: dict[str, PeerInstall] = {n: ensure_peer(n) for n in names}
        self.rows: list[dict[str, Any]] = []
        self.doc: dict[str, Any] = {
            "settings": {**vars(args)},
            "routers": {
                n: {"version": i.version, "python": str(i.python)} for n, i in self.installs.items()
            },
            "capacity": {},
        }
        self.started = time.monotonic()
        self.runs_done = 0
        self.runs_total = args.repeats * (
            len(args.loads) * len(ROUTERS_A) * ("A" in args.only)
            + len(MODES_B) * ("B" in args.only)
        ) + ("A" in args.only and args.capacity is None)

    def fleet(self, kind: str) -> FleetSpec:
        return FleetSpec(kind, PREFILL, DECODE, PROFILE, MODEL, self.args.speedup)

    def note(self, what: str) -> None:
        elapsed = time.monotonic() - self.started
        left = ""
        if self.runs_done:
            eta = elapsed / self.runs_done * (self.runs_total - self.runs_done)
            left = f", ~{eta / 60:.0f} min left"
        done = f"{elapsed / 60:.1f} min so far{left}"
        print(
            f"[{self.runs_done + 1}/{self.runs_total}] {what} ({done})",
            file=sys.stderr,
            flush=True,
        )

    async def live(self, spec: RouterSpec, workload: Workload, label: str) -> LiveRun:
        result = await run(
            spec,
            self.installs[spec.router],
            self.fleet(spec.fleet),
            workload,
            label=label,
            log_dir=self.out / "logs",
        )
        self.runs_done += 1
        return result

    def save(self) -> None:
        report.write_json(self.doc, self.rows, self.out / "pd.json")

    async def capacity(self) -> float:
        """Requests a second the P/D fleet completes under kvgate when saturated."""
        if self.args.capacity is not None:
            self.doc["capacity"] = {"rps": self.args.capacity, "how": "--capacity"}
            return float(self.args.capacity)
        chats = tenant_chats(self.args.seed + 1000, self.args.probe_chats)
        samples: list[tuple[float, int]] = []
        inner = closed_loop("probe", MODEL, family.conversations(chats), clients=PROBE_CLIENTS)
        workload = Workload("probe", inner.requests, _sampled(inner, samples))
        self.note(f"capacity probe: {inner.requests} requests, {PROBE_CLIENTS} clients")
        probe = await self.live(ROUTERS_A[0], workload, "probe/kvgate-pd")
        rps = steady_rate(samples)
        self.doc["capacity"] = {
            "rps": rps,
            "how": f"closed loop, {PROBE_CLIENTS} clients, kvgate P/D (vLLM fleet, "
            "conditional); completions a second over the middle half of them",
            "probe": _figures(probe),
        }
        print(f"  capacity: {rps:.2f} req/s", file=sys.stderr, flush=True)
        return rps

    async def comparison_a(self, capacity: float) -> None:
        for repeat in range(self.args.repeats):
            seed = self.args.seed + repeat
            for load in self.args.loads:
                rate = load * capacity
                think = THINK_MODEL_S / self.args.speedup
                chats = tenant_chats(seed, conversations_for(rate, self.args.duration, think))
                requests = chat_requests(chats, rate, think, seed, self.args.duration)
                cell = f"load-{load:g}"
                for spec in _rotated(ROUTERS_A, repeat):
                    self.note(
                        f"A {cell} repeat {repeat + 1}: {spec.name}, {len(requests)} requests "
                        f"at {rate:.2f} req/s"
                    )
                    workload = open_loop(cell, requests)
                    done = await self.live(spec, workload, f"A-{cell}-r{repeat}/{spec.name}")
                    row: dict[str, Any] = {"comparison": "A", "mode": "live", "cell": cell}
                    row["router"] = spec.name
                    row |= {"repeat": repeat, "seed": seed, "load": load, "offered_rps": rate}
                    row["sent_rps"] = len(requests) / self.args.duration
                    self.rows.append(row | _figures(done))
                    _print_run(self.rows[-1])
                    self.save()

    def trace_b(self, seed: int) -> tuple[list[TraceRequest], float]:
        """Comparison B's trace (model time) and its rate (model requests a second)."""
        profile = get_profile(PROFILE)
        capacity = prefill_capacity_rps(profile, mixed_trace(seed, self.args.b_requests, 1.0), 2)
        rate = self.args.b_load * capacity
        self.doc["capacity"].setdefault("b", []).append(
            {"seed": seed, "prefill_capacity_model_rps": capacity, "rate_model_rps": rate}
        )
        return mixed_trace(seed, self.args.b_requests, rate), rate

    async def comparison_b(self) -> None:
        speedup = self.args.speedup
        for repeat in range(self.args.repeats):
            seed = self.args.seed + repeat
            trace, rate = self.trace_b(seed)
            requests = timed_requests(time_scaled(trace, speedup), MODEL)
            for spec in _rotated(MODES_B, repeat):
                self.note(
                    f"B repeat {repeat + 1}: kvgate {spec.name}, {len(requests)} requests at "
                    f"{rate * speedup:.2f} req/s"
                )
                label = f"B-r{repeat}/{spec.name}"
                done = await self.live(spec, open_loop("mixed", requests), label)
                row: dict[str, Any] = {"comparison": "B", "mode": "live", "cell": "mixed"}
                row["router"] = spec.name
                row |= {"repeat": repeat, "seed": seed, "offered_rps": rate * speedup}
                self.rows.append(row | _figures(done) | _by_class(done, trace))
                _print_run(self.rows[-1])
                self.save()
            for spec in MODES_B:
                figures = simulate.replay(
                    trace,
                    spec.name,
                    profile=PROFILE,
                    prefill=PREFILL,
                    decode=DECODE,
                    speedup=speedup,
                )
                sim = {"comparison": "B", "mode": "sim", "cell": "mixed", "router": spec.name}
                self.rows.append(sim | {"repeat": repeat, "seed": seed} | figures)
                _print_run(self.rows[-1])
            self.save()


def _rotated(specs: Sequence[RouterSpec], k: int) -> list[RouterSpec]:
    """The routers in turn, starting with the k-th (so none always runs first)."""
    k %= len(specs)
    return [*specs[k:], *specs[:k]]


def _sampled(inner: Workload, samples: list[tuple[float, int]]) -> Send:
    """`inner`'s send, sampling (seconds, completions) every 0.25 s meanwhile."""

    async def sending(url: str | Fronts, headers: Mapping[str, str], stats: RunStats) -> None:
        await inner.send(url, headers, stats)

    async def send(url: str | Fronts, headers: Mapping[str, str], stats: RunStats) -> None:
        t0 = time.monotonic()
        task = asyncio.create_task(sending(url, headers, stats))
        while not task.done():
            samples.append((time.monotonic() - t0, len(stats.results)))
            await asyncio.wait([task], timeout=0.25)
        samples.append((time.monotonic() - t0, len(stats.results)))
        await task

    return send


def _figures(done: LiveRun) -> dict[str, Any]:
    r = done.result
    itls = r.itls_s
    figures = r.figures()
    return {
        **figures,
        "itl_mean_s": sum(itls) / len(itls) if itls else math.nan,
        "itl_p50_s": percentile(itls, 50),
        "itl_p90_s": percentile(itls, 90),
        **pd_figures(done),
        "ttfts_s": [round(t, 5) for t in r.ttfts_s],
    }


def _by_class(done: LiveRun, trace: Sequence[TraceRequest]) -> dict[str, float]:
    """Mean TTFT of the short and of the long prompts (open-loop ids are `req-<index>`)."""
    short: list[float] = []
    long: list[float] = []
    for x in done.result.results:
        if x.error is None and x.ttft_s is not None:
            (long if is_long(trace[int(x.request.split("-")[1])]) else short).append(x.ttft_s)
    return {
        "ttft_short_mean_s": sum(short) / len(short) if short else math.nan,
        "ttft_long_mean_s": sum(long) / len(long) if long else math.nan,
    }


def _print_run(row: dict[str, Any]) -> None:
    print(
        f"  -> {row['mode']} {row['router']}: TTFT mean {row['ttft_mean_s']:.3f} s, "
        f"p90 {row['ttft_p90_s']:.3f} s, ITL p50 {row['itl_p50_s'] * 1e3:.1f} ms, "
        f"errors {row['errors']}, {row['throughput_rps']:.2f} req/s, "
        f"split {row.get('split_share', math.nan):.2f} {row.get('decisions', '')}",
        file=sys.stderr,
        flush=True,
    )


async def main_async(args: argparse.Namespace) -> list[dict[str, Any]]:
    bench = Bench(args)
    if "A" in args.only:
        capacity = await bench.capacity()
        bench.save()
        await bench.comparison_a(capacity)
    if "B" in args.only:
        await bench.comparison_b()
    bench.save()
    plots = report.write_plots(bench.rows, bench.out)
    report.print_tables(bench.rows)
    print(f"\nwrote {bench.out / 'pd.json'}" + "".join(f", {p}" for p in plots))
    print(f"total {(time.monotonic() - bench.started) / 60:.1f} min")
    return bench.rows


def rerender(sources: Sequence[Path], out: Path) -> int:
    """The outputs of earlier runs, from their pd.json files (rows pooled; settings, routers
    and capacity of the first, the others' under `merged`), written into `out`."""
    docs = [orjson.loads(source.read_bytes()) for source in sources]
    rows = [row for doc in docs for row in doc["rows"]]
    kept = {k: docs[0][k] for k in ("settings", "routers", "capacity") if k in docs[0]}
    if len(docs) > 1:
        kept["merged"] = [
            {"source": str(src), **{k: doc[k] for k in ("settings", "capacity") if k in doc}}
            for src, doc in zip(sources[1:], docs[1:], strict=True)
        ]
    report.write_json(kept, rows, out / "pd.json")
    plots = report.write_plots(rows, out)
    report.print_tables(rows)
    print(f"\nwrote {out / 'pd.json'}" + "".join(f", {p}" for p in plots))
    return 1 if any(r["errors"] for r in rows) else 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m bench pd",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--repeats", type=int, default=3, help="seeds per cell (default 3)")
    p.add_argument("--quick", action="store_true", help="smoke run: 1 repeat, short cells")
    p.add_argument("--only", default="AB", help="comparisons to run: A, B or AB (default)")
    p.add_argument("--speedup", type=float, default=0.5, help="emulator speedup (default 0.5)")
    p.add_argument("--loads", default="0.5,0.8", help="A: fractions of capacity")
    p.add_argument("--capacity", type=float, help="A: capacity in req/s (default: probe)")
    p.add_argument("--duration", type=float, default=30.0, help="A: seconds of arrivals a run")
    p.add_argument("--probe-chats", type=int, default=90, help="chats in the capacity probe")
    p.add_argument("--b-requests", type=int, default=100, help="B: requests a run")
    p.add_argument("--b-load", type=float, default=0.6, help="B: fraction of D's prefill rate")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", default="out/bench/pd")
    p.add_argument(
        "--from-json",
        type=Path,
        nargs="+",
        metavar="FILE",
        help="run nothing: the tables, JSON and plots again from earlier pd.json files (their "
        "rows pooled, e.g. a run with --loads 0.3 --capacity C beside the run that probed C)",
    )
    args = p.parse_args(argv)
    if args.from_json is not None:
        return rerender(args.from_json, Path(args.out))
    args.loads = [float(x) for x in args.loads.split(",")]
    if args.quick:
        args.repeats, args.duration, args.probe_chats, args.b_requests = 1, 12.0, 30, 50
    rows = asyncio.run(main_async(args))
    return 1 if any(r["errors"] for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
