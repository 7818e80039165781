"""Admission control under a burst of 10x capacity, on an emulated fleet.

`python -m bench admission [--quick] [--out out/bench/admission]` (`make bench-admission`).
Starts `kvgate emulate` and `kvgate serve` with an `admission:` section (a per-backend cap, the
tenant from header `x-tenant`), then: (1) requests one at a time: the unloaded TTFT; (2) as
many clients as the cap admits, back to back: the fleet's throughput at capacity; (3) an open-
loop burst at `--factor` times that throughput from tenants of unequal demand: the shed
fraction (429), the admitted requests' TTFT against the unloaded one (target within 2x) and
each tenant's share of the admitted requests against its max-min fair share, over the whole
burst and over the arrivals once the fleet is contended (after two mean service times: the
first places go to whoever comes first). Writes `admission.json` and `admission.png` to `--out`
and prints the tables.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml

from bench.admission.load import (
    TENANT_HEADER,
    Workload,
    burst_schedule,
    closed_loop,
    open_loop,
    sequential,
)
from bench.admission.report import burst_figures, ttft_figures, verdicts, write_outputs
from sim.live.processes import start_emulator, start_gateway

MODEL = "kvgate-demo"


@dataclass(frozen=True, slots=True)
class Settings:
    """What one run does (all from the command line)."""

    replicas: int
    profile: str
    speedup: float
    cap: int
    queue_timeout_s: float
    max_queue: int
    prompt_tokens: int
    output_tokens: int
    unloaded_requests: int
    capacity_s: float
    factor: float
    burst_s: float
    tenants: dict[str, float]
    seed: int
    out: Path


def _tenants(text: str) -> dict[str, float]:
    pairs = (item.split(":", 1) for item in text.split(","))
    return {name: float(weight) for name, weight in pairs}


def parse_args(argv: Sequence[str] | None = None) -> Settings:
    p = argparse.ArgumentParser(
        prog="python -m bench admission", description=__doc__.splitlines()[0]
    )
    p.add_argument("--replicas", type=int, default=8, help="emulated replicas (default 8)")
    p.add_argument(
        "--profile", default="h100-llama3-8b", help="engine profile (default h100-llama3-8b)"
    )
    p.add_argument("--speedup", type=float, default=0.1, help="engine time scale (0.1: 10x slower)")
    p.add_argument("--cap", type=int, default=4, help="max_in_flight_per_backend (4)")
    p.add_argument("--queue-timeout", type=float, default=0.2, help="queue_timeout_s (0.2)")
    p.add_argument("--max-queue", type=int, default=64, help="max_queue (64)")
    p.add_argument("--prompt-tokens", type=int, default=1000, help="per request (1000)")
    p.add_argument("--output-tokens", type=int, default=16, help="mean per request (16)")
    p.add_argument("--unloaded", type=int, default=40, help="sequential requests (40)")
    p.add_argument("--capacity-s", type=float, default=8.0, help="closed-loop phase (8 s)")
    p.add_argument("--factor", type=float, default=10.0, help="burst over capacity (10)")
    p.add_argument("--burst-s", type=float, default=20.0, help="burst duration (20 s)")
    p.add_argument(
        "--tenants", default="heavy:8,medium:1.7,light:0.3", help="name:weight,... of the burst"
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quick", action="store_true", help="20 unloaded, 4 s at capacity, 8 s burst")
    p.add_argument("--out", default="out/bench/admission", help="output directory")
    a = p.parse_args(argv)
    unloaded, capacity_s, burst_s = a.unloaded, a.capacity_s, a.burst_s
    if a.quick:
        unloaded, capacity_s, burst_s = 20, 4.0, 8.0
    return Settings(
        replicas=a.replicas,
        profile=a.profile,
        speedup=a.speedup,
        cap=a.cap,
        queue_timeout_s=a.queue_timeout,
        max_queue=a.max_queue,
        prompt_tokens=a.prompt_tokens,
        output_tokens=a.output_tokens,
        unloaded_requests=unloaded,
        capacity_s=capacity_s,
        factor=a.factor,
        burst_s=burst_s,
        tenants=_tenants(a.tenants),
        seed=a.seed,
        out=Path(a.out),
    )


def gateway_config(s: Settings) -> dict[str, Any]:
    return {
        "server": {"access_log": False},
        "admission": {
            "max_in_flight_per_backend": s.cap,
            "queue_timeout_s": s.queue_timeout_s,
            "max_queue": s.max_queue,
            "tenant_header": TENANT_HEADER,
        },
    }


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def run(s: Settings, logs: Path) -> tuple[dict[str, Any], dict[str, list[float]]]:
    config = logs / "kvgate.yaml"
    config.write_text(yaml.safe_dump(gateway_config(s)))
    emulator, urls = start_emulator(
        s.replicas, s.profile, MODEL, logs / "emulator.log", speedup=s.speedup
    )
    with emulator:
        gateway, url = start_gateway(
            urls, "prefix-aware", logs / "gateway.log", extra=("--config", str(config))
        )
        with gateway:
            time.sleep(1.0)  # a few metric scrapes
            return asyncio.run(_phases(s, url))


async def _phases(s: Settings, url: str) -> tuple[dict[str, Any], dict[str, list[float]]]:
    w = Workload(MODEL, s.prompt_tokens, s.output_tokens, s.seed)
    _say(f"[1/3] unloaded: {s.unloaded_requests} requests one at a time")
    unloaded_shots = await sequential(url, w, s.unloaded_requests)
    unloaded = ttft_figures(unloaded_shots)
    clients = s.cap * s.replicas
    _say(f"[2/3] at capacity: {clients} clients for {s.capacity_s:g} s")
    cap_shots = await closed_loop(url, w, clients, s.capacity_s)
    served = [c for c in cap_shots if c.status == 200]
    throughput = len(served) / max(c.sent_s + c.duration_s for c in cap_shots)
    capacity = {**ttft_figures(served), "clients": clients, "throughput_rps": throughput}
    rate = s.factor * throughput
    _say(f"[3/3] burst: {rate:.0f} req/s ({s.factor:g}x) for {s.burst_s:g} s, tenants {s.tenants}")
    schedule = burst_schedule(rate, s.burst_s, s.tenants, s.seed)
    burst_shots = await open_loop(url, w, schedule)
    # Contention starts once the first places are taken and their requests start to finish.
    settle_s = 2 * sum(c.duration_s for c in served) / max(1, len(served))
    burst = burst_figures(burst_shots, unloaded, s.burst_s, settle_s)
    report = {"unloaded": unloaded, "capacity": capacity, "burst": burst}
    ttfts = {
        "unloaded": [x.ttft_s for x in unloaded_shots if x.ttft_s is not None],
        "at capacity": [x.ttft_s for x in served if x.ttft_s is not None],
        "burst, admitted": [x.ttft_s for x in burst_shots if x.ttft_s is not None],
    }
    return report, ttfts


def main(argv: Sequence[str] | None = None) -> int:
    settings = parse_args(argv)
    logs = settings.out / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    when = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    _say(f"admission bench: {os.cpu_count()} cores shared, logs in {logs}")
    figures, ttfts = run(settings, logs)
    report = {
        "started_utc": when,
        "wall_s": time.monotonic() - started,
        "cores": os.cpu_count(),
        "settings": {**asdict(settings), "out": str(settings.out)},
        **figures,
        "verdicts": verdicts(figures["burst"]),
    }
    write_outputs(report, ttfts, settings.out)
    _say(f"wall time {report['wall_s']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
