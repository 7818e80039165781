"""Part 2: the latency each front end adds at a fixed rate, measured side by side.

The overhead bench's stub replicas (near-zero cost) and its open-loop wrk driver: small chat
completions (half streaming) at `rate` requests/s, sent in rounds to every target in turn —
direct to one stub (the baseline), Envoy round-robin, Envoy + `kvgate epp`, `kvgate serve`
— with the order rotated each round so drift hits every target alike. All targets run for
the whole part; added latency is a target's percentile minus direct's in the same round.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

from bench.overhead.__main__ import Target, launch
from bench.overhead.fleet import MODEL, StubFleet, start_stub_fleet
from bench.overhead.wrk import WrkResult, ensure_wrk, run_wrk
from sim.live.envoy import start_envoy, start_epp

DIRECT = "direct"
ENVOY_RR = "envoy round-robin"
ENVOY_EPP = "envoy + kvgate epp"
FRONT_DOOR = "kvgate serve"
TARGETS = (DIRECT, ENVOY_RR, ENVOY_EPP, FRONT_DOOR)


@contextlib.contextmanager
def start_targets(
    fleet: StubFleet, logs: Path, policy: str, body_mode: str, template: str = "envoy.yaml"
) -> Iterator[dict[str, Target]]:
    """Every target running at once, in front of the same stubs (Envoy from `template`)."""
    with contextlib.ExitStack() as stack:
        direct = stack.enter_context(launch(DIRECT, fleet, logs))
        envoy, rr_url, _ = start_envoy(
            fleet.urls, None, logs / "hop-envoy-rr.log", template=template
        )
        stack.enter_context(envoy)
        epp = start_epp(fleet.urls, logs / "hop-epp.log", extra=("--policy", policy))
        stack.enter_context(epp.proc)
        picked, epp_url, _ = start_envoy(
            fleet.urls,
            epp.grpc_port,
            logs / "hop-envoy-epp.log",
            body_mode=body_mode,
            template=template,
        )
        stack.enter_context(picked)
        front = stack.enter_context(launch(f"kvgate:{policy}", fleet, logs))
        yield {
            DIRECT: direct,
            ENVOY_RR: Target(ENVOY_RR, rr_url, envoy.pid, command=envoy.command),
            ENVOY_EPP: Target(ENVOY_EPP, epp_url, epp.proc.pid, command=epp.proc.command),
            FRONT_DOOR: front,
        }


def rotated(names: tuple[str, ...], round_index: int) -> tuple[str, ...]:
    """`names` starting at position `round_index` (mod its length)."""
    k = round_index % len(names)
    return names[k:] + names[:k]


def run_hop(
    *,
    rate: float,
    rounds: int,
    duration_s: float,
    warmup_s: float,
    policy: str,
    body_mode: str,
    logs: Path,
    template: str = "envoy.yaml",
) -> list[dict[str, dict[str, Any]]]:
    """`rounds` rounds of one wrk run per target; per round, target → the run's figures."""
    wrk = ensure_wrk()
    fleet = start_stub_fleet(2, logs / "hop-stub-engine.log")
    measured: list[dict[str, dict[str, Any]]] = []
    try:
        with start_targets(fleet, logs, policy, body_mode, template) as targets:
            for name in TARGETS:  # unrecorded: connections opened, caches warm
                _shoot(wrk, targets[name], rate, warmup_s)
            for r in range(rounds):
                row: dict[str, dict[str, Any]] = {}
                for name in rotated(TARGETS, r):
                    result = _shoot(wrk, targets[name], rate, duration_s)
                    row[name] = {**asdict(result), "sustained": result.sustained}
                    print(
                        f"  [hop {r + 1}/{rounds}] {name:<20} {result.achieved_rps:6.1f}/s "
                        f"p50 {result.p50_s * 1e3:6.2f} ms p99 {result.p99_s * 1e3:6.2f} ms "
                        f"err {result.errors} late {result.late}",
                        file=sys.stderr,
                        flush=True,
                    )
                measured.append(row)
    finally:
        fleet.process.stop()
    return measured


def _shoot(wrk: str, target: Target, rate: float, duration_s: float) -> WrkResult:
    return run_wrk(
        wrk,
        target.url,
        rate=rate,
        duration_s=duration_s,
        connections=64,
        model=MODEL,
        stream_fraction=0.5,
        headers=target.headers,
    )
