"""`python -m bench fidelity`: live vs simulated, per policy (see `bench.fidelity`)."""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml

from bench.fidelity.check import PolicyCheck, check_policy
from bench.fidelity.live import LiveFleet, run_live
from bench.fidelity.report import format_report, write_json, write_plot
from bench.fidelity.workload import MODEL, FidelitySettings, build_trace, slowed
from sim.engine.profiles import get_profile
from sim.live.experiment import Fleet
from sim.plots import PLOTS_SKIPPED, PlotsUnavailable
from sim.replay import SimSettings, load_config
from sim.workloads import timed_requests


def _log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


async def run_check(s: FidelitySettings) -> tuple[list[PolicyCheck], dict[str, Any]]:
    profile = slowed(get_profile(s.profile), s.slowdown)
    trace = build_trace(s, profile.config.block_size)
    requests = timed_requests(trace, MODEL, include_usage=True)
    s.out_dir.mkdir(parents=True, exist_ok=True)
    config_path = s.out_dir / "gateway.yaml"
    config_path.write_text(yaml.safe_dump(s.gateway_config), encoding="utf-8")
    sim_settings = SimSettings(replicas=s.replicas, seed=s.sim_seed, **load_config(config_path))
    fleet = LiveFleet(
        Fleet(s.replicas, s.profile, MODEL, speedup=1 / s.slowdown),
        config_path,
        sim_settings.scrape_interval_s,
        s.out_dir,
    )
    span = trace[-1].arrival_s if trace else 0.0
    _log(
        f"fidelity: {len(trace)} requests ({s.sessions} chats of {s.turns} turns, "
        f"{s.tenants} tenants) over {span:.0f} s; {s.replicas} replicas of {s.profile!r}"
        f"{f' slowed {s.slowdown:g}x' if s.slowdown != 1 else ''}; "
        f"policies {', '.join(s.policies)}; config {config_path}"
    )
    checks = []
    for policy in s.policies:
        _log(f"{policy}: live run")
        live = await run_live(fleet, policy, requests)
        started = time.perf_counter()
        check = check_policy(live, trace, profile, sim_settings)
        _log(
            f"{policy}: simulated the trace and the recording in "
            f"{time.perf_counter() - started:.2f} s; mean TTFT live "
            f"{check.live_metrics.ttft_mean_s * 1000:.0f} ms, sim "
            f"{check.sim.metrics.ttft_mean_s * 1000:.0f} ms, sim on recording "
            f"{check.recorded.metrics.ttft_mean_s * 1000:.0f} ms"
        )
        checks.append(check)
    return checks, _header(s, len(trace), span, profile.config.block_size)


def _header(s: FidelitySettings, requests: int, span_s: float, block_tokens: int) -> dict[str, Any]:
    """What `fidelity.json` says about the run besides the per-policy results."""
    return {
        "trace": {
            "generator": "sim.workloads.open_loop_chats",
            "requests": requests,
            "span_s": span_s,
            **{k: getattr(s, k) for k in _TRACE_FIELDS},
            "block_tokens": block_tokens,
        },
        "replicas": s.replicas,
        "profile": s.profile,
        "slowdown": s.slowdown,
        "gateway_config": s.gateway_config,
        "sim_seed": s.sim_seed,
    }


_TRACE_FIELDS = (
    "seed",
    "sessions",
    "turns",
    "tenants",
    "rate_per_s",
    "think_s",
    "system_tokens",
    "user_tokens",
    "output_tokens",
)


def _parse(argv: list[str] | None) -> FidelitySettings:
    d = FidelitySettings()
    p = argparse.ArgumentParser(prog="python -m bench fidelity", description=__doc__)
    p.add_argument("--policies", default=",".join(d.policies))
    p.add_argument("--replicas", type=int, default=d.replicas)
    p.add_argument("--profile", default=d.profile, help="engine profile of both sides")
    p.add_argument("--sessions", type=int, default=d.sessions, help="chats in the trace")
    p.add_argument("--rate", type=float, default=d.rate_per_s, help="chats started per second")
    p.add_argument("--seed", type=int, default=d.seed, help="seed of the trace")
    p.add_argument(
        "--slowdown",
        type=float,
        default=d.slowdown,
        help="engines and arrivals X times slower on both sides (default %(default)g)",
    )
    p.add_argument("--out", default=str(d.out_dir))
    a = p.parse_args(argv)
    policies = tuple(x for x in a.policies.split(",") if x)
    return replace(
        d,
        policies=policies,
        replicas=a.replicas,
        profile=a.profile,
        sessions=a.sessions,
        rate_per_s=a.rate,
        seed=a.seed,
        slowdown=a.slowdown,
        out_dir=Path(a.out),
    )


def main(argv: list[str] | None = None) -> int:
    settings = _parse(argv)
    started = time.monotonic()
    checks, header = asyncio.run(run_check(settings))
    header["wall_s"] = time.monotonic() - started
    print()
    print(format_report(checks))
    paths = [write_json(header, checks, settings.out_dir)]
    try:
        paths.append(write_plot(checks, settings.out_dir))
    except PlotsUnavailable:
        print(PLOTS_SKIPPED)
    print(f"\nwrote {', '.join(map(str, paths))} in {header['wall_s']:.0f} s")
    return 1 if any(c.live.errors for c in checks) else 0


if __name__ == "__main__":
    sys.exit(main())
