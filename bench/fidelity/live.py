"""The live half of the fidelity check: emulated replicas and the gateway, as child processes.

A fresh fleet (`kvgate emulate`) and gateway (`kvgate serve --config … --record …`) per
policy; the trace's requests are sent open-loop at their arrival times; TTFT is measured by
the client from the stream. The replicas' own counters are read before and after: prefix
cache hits and queries (the hit rate); their TTFT histogram's sum and count, which give the
engines' mean TTFT from the request's arrival at the engine, so that the client's TTFT
splits into engine time and what HTTP, the gateway and the client add on top; and their
inter-token latency's, which show how much longer than modelled the emulated steps took.
"""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from sim.loadgen import RunStats, TimedRequest, progress_ticker, run_timed
from sim.processes import start_emulator, start_gateway
from sim.scrape import parse_vllm_metrics

PROGRESS_EVERY_S = 5.0
READY_TIMEOUT_S = 30.0


@dataclass(frozen=True, slots=True)
class Counters:
    """The replicas' cumulative counters, summed over the fleet."""

    requests: int = 0  # finished
    prefix_hits: int = 0  # tokens
    prefix_queries: int = 0  # tokens
    ttft_sum_s: float = 0.0
    ttft_count: int = 0
    itl_sum_s: float = 0.0
    itl_count: int = 0

    def __add__(self, other: Counters) -> Counters:
        return Counters(
            self.requests + other.requests,
            self.prefix_hits + other.prefix_hits,
            self.prefix_queries + other.prefix_queries,
            self.ttft_sum_s + other.ttft_sum_s,
            self.ttft_count + other.ttft_count,
            self.itl_sum_s + other.itl_sum_s,
            self.itl_count + other.itl_count,
        )

    def __sub__(self, other: Counters) -> Counters:
        return Counters(
            self.requests - other.requests,
            self.prefix_hits - other.prefix_hits,
            self.prefix_queries - other.prefix_queries,
            self.ttft_sum_s - other.ttft_sum_s,
            self.ttft_count - other.ttft_count,
            self.itl_sum_s - other.itl_sum_s,
            self.itl_count - other.itl_count,
        )


@dataclass(frozen=True, slots=True)
class LiveRun:
    """What one live run measured."""

    policy: str
    ttfts_s: tuple[float, ...]  # client-side, requests that got a first token
    errors: int
    counters: Counters  # deltas over the run
    requests_per_replica: tuple[int, ...]
    wall_s: float
    record_path: Path
    load_average: float  # the machine's 1-minute load average at the end of the run

    @property
    def engine_ttft_mean_s(self) -> float:
        c = self.counters
        return c.ttft_sum_s / c.ttft_count if c.ttft_count else float("nan")

    @property
    def engine_itl_mean_s(self) -> float:
        """The engines' mean gap between tokens: their steps' real length, slips included."""
        c = self.counters
        return c.itl_sum_s / c.itl_count if c.itl_count else float("nan")


_HISTOGRAMS = {
    "vllm:time_to_first_token_seconds_sum": "ttft_sum_s",
    "vllm:time_to_first_token_seconds_count": "ttft_count",
    "vllm:inter_token_latency_seconds_sum": "itl_sum_s",
    "vllm:inter_token_latency_seconds_count": "itl_count",
}


def parse_counters(text: str) -> Counters:
    """Counters from one replica's /metrics text (vLLM's names)."""
    report = parse_vllm_metrics("", text)
    sums = dict.fromkeys(_HISTOGRAMS.values(), 0.0)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            field = _HISTOGRAMS.get(sample.name)
            if field is not None:
                sums[field] += sample.value
    return Counters(
        report.requests,
        report.prefix_hits,
        report.prefix_queries,
        sums["ttft_sum_s"],
        int(sums["ttft_count"]),
        sums["itl_sum_s"],
        int(sums["itl_count"]),
    )


async def _scrape(client: httpx.AsyncClient, urls: list[str]) -> tuple[Counters, list[int]]:
    total, per_replica = Counters(), []
    for url in urls:
        resp = await client.get(url + "/metrics")
        resp.raise_for_status()
        c = parse_counters(resp.text)
        total += c
        per_replica.append(c.requests)
    return total, per_replica


async def _wait_ready(client: httpx.AsyncClient, gateway: str, scrape_s: float) -> None:
    """Until the gateway has a healthy backend, then a few scrape periods for its metrics."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    while (await client.get(gateway + "/ready")).status_code != 200:
        if time.monotonic() > deadline:
            raise TimeoutError(f"gateway {gateway} not ready after {READY_TIMEOUT_S} s")
        await asyncio.sleep(0.05)
    await asyncio.sleep(4 * scrape_s)


@dataclass(frozen=True, slots=True)
class LiveFleet:
    """How to start the fleet and the gateway for one live run."""

    replicas: int
    profile: str
    model: str
    config_path: Path
    scrape_interval_s: float
    out_dir: Path
    speedup: float = 1.0


async def run_live(fleet: LiveFleet, policy: str, requests: list[TimedRequest]) -> LiveRun:
    logs = fleet.out_dir / "logs"
    record = fleet.out_dir / f"recorded-{policy}.jsonl"
    record.unlink(missing_ok=True)  # the gateway appends
    emulator, urls = start_emulator(
        fleet.replicas,
        fleet.profile,
        fleet.model,
        logs / f"emulator-{policy}.log",
        speedup=fleet.speedup,
    )
    try:
        extra = ["--config", str(fleet.config_path), "--record", str(record)]
        gateway, gw_url = start_gateway(urls, policy, logs / f"gateway-{policy}.log", extra)
        try:
            async with httpx.AsyncClient(timeout=10) as client:
                await _wait_ready(client, gw_url, fleet.scrape_interval_s)
                before, first = await _scrape(client, urls)
                stats, done = RunStats(), asyncio.Event()
                ticker = asyncio.create_task(
                    progress_ticker(f"live {policy}", stats, len(requests), done, PROGRESS_EVERY_S)
                )
                started = time.monotonic()
                try:
                    await run_timed(gw_url, requests, stats)
                finally:
                    done.set()
                    await ticker
                wall = time.monotonic() - started
                after, last = await _scrape(client, urls)
        finally:
            gateway.stop()  # flushes the recording
    finally:
        emulator.stop()
    return LiveRun(
        policy=policy,
        ttfts_s=tuple(sorted(r.ttft_s for r in stats.results if r.ttft_s is not None)),
        errors=stats.errors,
        counters=after - before,
        requests_per_replica=tuple(b - a for a, b in zip(first, last, strict=True)),
        wall_s=wall,
        record_path=record,
        load_average=os.getloadavg()[0],
    )
