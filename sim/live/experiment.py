"""One live experiment: a fresh fleet, a router, a workload, the replicas' counters around it.

`run_experiment` launches `fleet` (a `FleetLauncher`: `Fleet` starts `kvgate emulate`, cold
caches every time, `PdFleet` its P/D replicas; a caller may bring replicas of its own, e.g.
real engines whose caches it resets), starts a router in front of it through a
`RouterFactory` (kvgate with a policy, `kvgate_router`, or any other router a caller can
start), scrapes the replicas' counters, sends the workload through the router while printing
progress, scrapes again, and stops the router, then releases the fleet. The result is typed:
every request as the client saw it, each replica's counters over the run (deltas of the two
scrapes), and the figures every report shows: the prefix-cache hit rate as the replicas count
it (hit tokens / looked-up tokens, summed over replicas) and client TTFT percentiles of the
requests that succeeded (nearest rank, `routing.percentile`).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import httpx

from routing.percentile import percentile
from sim.live.client import (
    Fronts,
    RequestResult,
    RunStats,
    report_progress,
    run_closed_loop,
    run_open_loop,
)
from sim.live.processes import start_emulator, start_gateway, start_pd_emulator
from sim.live.scrape import ReplicaReport, scrape_replicas
from sim.workloads import Conversation, TimedRequest

# (router URL or front ends, headers every request must carry, where results go)
Send = Callable[[str | Fronts, Mapping[str, str], RunStats], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class Workload:
    """What to send through the router, and how many requests that makes."""

    name: str
    requests: int
    send: Send


def closed_loop(
    name: str, model: str, conversations: list[Conversation], clients: int | None = None
) -> Workload:
    """Chats sent closed loop, each request carrying its conversation's `x-session-id`; with
    `clients`, by that many clients in turn (`run_closed_loop`)."""

    async def send(url: str | Fronts, headers: Mapping[str, str], stats: RunStats) -> None:
        await run_closed_loop(
            url,
            model,
            conversations,
            stats,
            lambda c: {**headers, "x-session-id": c.id},
            clients=clients,
        )

    return Workload(name, sum(len(c.user_turns) for c in conversations), send)


def open_loop(name: str, requests: list[TimedRequest]) -> Workload:
    """Requests sent open loop, at their times."""

    async def send(url: str | Fronts, headers: Mapping[str, str], stats: RunStats) -> None:
        await run_open_loop(url, requests, stats, headers)

    return Workload(name, len(requests), send)


class FleetLauncher(Protocol):
    """Replicas serving `model`: `launch` gives their URLs on entry, cold, and stops or
    releases them on exit; blocking (run in a worker thread). Child processes log to
    `log_dir` under names that begin with `tag`."""

    @property
    def model(self) -> str: ...

    def launch(self, log_dir: Path, tag: str) -> AbstractContextManager[Sequence[str]]: ...


@dataclass(frozen=True, slots=True)
class Fleet:
    """Emulated replicas (`kvgate emulate`), started fresh for every experiment."""

    replicas: int
    profile: str
    model: str
    speedup: float = 1.0
    extra_args: tuple[str, ...] = ()

    @contextlib.contextmanager
    def launch(self, log_dir: Path, tag: str) -> Iterator[Sequence[str]]:
        emulator, urls = start_emulator(
            self.replicas,
            self.profile,
            self.model,
            log_dir / f"{tag}-emulator.log",
            speedup=self.speedup,
            extra=self.extra_args,
        )
        with emulator:
            yield urls


@dataclass(frozen=True, slots=True)
class PdFleet:
    """Emulated P/D replicas (`kvgate emulate --prefill N --decode M`), started fresh for
    every experiment; their URLs prefill first, in the order of `roles`."""

    prefill: int
    decode: int
    profile: str
    model: str
    speedup: float = 1.0
    protocol: str = "vllm"  # SGLang's also needs each prefill's bootstrap port in the router
    extra_args: tuple[str, ...] = ()

    @property
    def roles(self) -> tuple[str, ...]:
        return ("prefill",) * self.prefill + ("decode",) * self.decode

    @contextlib.contextmanager
    def launch(self, log_dir: Path, tag: str) -> Iterator[Sequence[str]]:
        emulator, fleet = start_pd_emulator(
            self.prefill,
            self.decode,
            self.protocol,
            log_dir / f"{tag}-emulator.log",
            profile=self.profile,
            model=self.model,
            speedup=self.speedup,
            extra=self.extra_args,
        )
        with emulator:
            yield [url for url, _ in fleet.prefill] + fleet.decode


@dataclass(frozen=True, slots=True)
class RouterSite:
    """Where a router is started: in front of these replicas, logging into `log_dir` under
    names that begin with `tag` (unique per experiment)."""

    replica_urls: tuple[str, ...]
    model: str
    log_dir: Path
    tag: str


@dataclass(frozen=True, slots=True)
class Router:
    """A running router: its URL, the headers every request must carry, its command line;
    `fronts`: several front ends the clients spread over themselves (then `url` is the
    first)."""

    url: str
    headers: Mapping[str, str] = field(default_factory=dict)
    command: tuple[str, ...] = ()
    fronts: Fronts | None = None


# Starts a router when entered, stops it on exit; blocking (run in a worker thread).
RouterFactory = Callable[[RouterSite], AbstractContextManager[Router]]


def kvgate_router(
    policy: str,
    extra_args: Sequence[str] = (),
    settle_s: float = 0.0,
    roles: Sequence[str] = (),
) -> RouterFactory:
    """`kvgate serve --policy POLICY EXTRA_ARGS` on a free port, once ready plus `settle_s`
    (e.g. a few scrape periods, so its first decisions see engine metrics); `roles`: each
    replica's P/D role, in order (`PdFleet.roles`; empty: every one `both`)."""

    @contextlib.contextmanager
    def start(site: RouterSite) -> Iterator[Router]:
        log = site.log_dir / f"{site.tag}-gateway.log"
        backends = site.replica_urls
        if roles:
            backends = tuple(f"{u},role={r}" for u, r in zip(backends, roles, strict=True))
        process, url = start_gateway(backends, policy, log, extra_args)
        with process:
            time.sleep(settle_s)
            yield Router(url, {}, tuple(process.command))

    return start


@dataclass(frozen=True, slots=True)
class ExperimentResult:
    """What one experiment measured; the figures are over the requests that succeeded."""

    label: str
    results: tuple[RequestResult, ...]
    replicas: tuple[ReplicaReport, ...]  # counters' growth over the run, per replica
    wall_s: float
    router: Router
    hit_rate: float
    ttft_p50_s: float
    ttft_p90_s: float
    ttft_p99_s: float
    ttft_mean_s: float

    @classmethod
    def of(
        cls,
        label: str,
        results: Sequence[RequestResult],
        replicas: Sequence[ReplicaReport],
        wall_s: float,
        router: Router,
    ) -> ExperimentResult:
        ttfts = sorted(r.ttft_s for r in results if r.error is None and r.ttft_s is not None)
        queries = sum(r.prefix_queries for r in replicas)
        return cls(
            label=label,
            results=tuple(results),
            replicas=tuple(replicas),
            wall_s=wall_s,
            router=router,
            hit_rate=sum(r.prefix_hits for r in replicas) / queries if queries else 0.0,
            ttft_p50_s=percentile(ttfts, 50),
            ttft_p90_s=percentile(ttfts, 90),
            ttft_p99_s=percentile(ttfts, 99),
            ttft_mean_s=sum(ttfts) / len(ttfts) if ttfts else math.nan,
        )

    def figures(self) -> dict[str, object]:
        """The figures every live report keeps of a run (TTFT as the client measured it,
        hit rate and load share from the replicas' counters)."""
        return {
            "requests": len(self.results),
            "errors": len(self.errors),
            "error_samples": self.errors[:3],
            "ttft_mean_s": self.ttft_mean_s,
            "ttft_p50_s": self.ttft_p50_s,
            "ttft_p90_s": self.ttft_p90_s,
            "ttft_p99_s": self.ttft_p99_s,
            "hit_rate": self.hit_rate,
            "max_mean_share": self.max_mean_share,
            "requests_per_replica": self.requests_per_replica,
            "throughput_rps": self.throughput_rps,
            "engine_ttft_mean_s": self.engine_ttft_mean_s,
            "wall_s": self.wall_s,
            "command": list(self.router.command),
        }

    @property
    def errors(self) -> list[str]:
        return [r.error for r in self.results if r.error]

    @property
    def ttfts_s(self) -> list[float]:
        """TTFTs of the requests that succeeded, ascending."""
        return sorted(r.ttft_s for r in self.results if r.error is None and r.ttft_s is not None)

    @property
    def itls_s(self) -> list[float]:
        """Gaps between streamed chunks of the requests that succeeded, ascending."""
        return sorted(g for r in self.results if r.error is None for g in r.itls_s)

    @property
    def requests_per_replica(self) -> list[int]:
        return [r.requests for r in self.replicas]

    @property
    def max_mean_share(self) -> float:
        """The busiest replica's requests over the mean (1.0: perfectly even)."""
        shares = self.requests_per_replica
        mean = sum(shares) / len(shares) if shares else 0.0
        return max(shares) / mean if mean else math.nan

    @property
    def engine_ttft_mean_s(self) -> float:
        """Mean TTFT as the replicas measured it (their histogram), without the router and
        the client: where it moves less than the client's, the difference is outside the
        engines."""
        n = sum(r.ttft_count for r in self.replicas)
        return sum(r.ttft_sum_s for r in self.replicas) / n if n else math.nan

    @property
    def throughput_rps(self) -> float:
        return len(self.results) / self.wall_s if self.wall_s else 0.0


async def run_experiment(
    fleet: FleetLauncher,
    router: RouterFactory,
    workload: Workload,
    *,
    label: str,
    log_dir: Path,
    progress_every_s: float = 5.0,
) -> ExperimentResult:
    """Run `workload` through a router started by `router` in front of `fleet`, launched
    for this experiment; child processes log to `log_dir/<label>-*.log` (label: unique per
    experiment)."""
    tag = label.replace("/", "-").replace(" ", "-")
    launched = fleet.launch(log_dir, tag)
    urls = list(await asyncio.to_thread(launched.__enter__))
    try:
        site = RouterSite(tuple(urls), fleet.model, log_dir, tag)
        started = router(site)
        running = await asyncio.to_thread(started.__enter__)
        try:
            stats, reports, wall = await _measure(running, urls, workload, label, progress_every_s)
        finally:
            await asyncio.to_thread(started.__exit__, None, None, None)
    finally:
        await asyncio.to_thread(launched.__exit__, None, None, None)
    return ExperimentResult.of(label, stats.results, reports, wall, running)


async def _measure(
    router: Router, urls: list[str], workload: Workload, label: str, every_s: float
) -> tuple[RunStats, list[ReplicaReport], float]:
    async with httpx.AsyncClient(timeout=10) as client:
        before = await scrape_replicas(client, urls)
        stats, done = RunStats(), asyncio.Event()
        ticker = asyncio.create_task(
            report_progress(label, stats, workload.requests, done, every_s)
        )
        t0 = time.monotonic()
        try:
            await workload.send(router.fronts or router.url, router.headers, stats)
        finally:
            done.set()
            await ticker
        wall = time.monotonic() - t0
        after = await scrape_replicas(client, urls)
    reports = [a.since(b) for b, a in zip(before, after, strict=True)]
    return stats, reports, wall
