"""`python -m bench fidelity`: live vs simulated, per case and policy (see `bench.fidelity`)."""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import yaml

from bench.fidelity.check import PolicyCheck, check_policy
from bench.fidelity.live import SETTLE_SCRAPES, LiveFleet, run_live
from bench.fidelity.probe import Overheads, probe_overheads
from bench.fidelity.report import format_report, write_json, write_plot
from bench.fidelity.workload import CASES, MODEL, Case, FidelitySettings, build_case
from sim.engine.types import EngineProfile, FrontEnd
from sim.live.experiment import Fleet, PdFleet
from sim.plots import PLOTS_SKIPPED, PlotsUnavailable
from sim.replay import SimSettings, load_config
from sim.workloads import timed_requests


def _log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


async def run_check(s: FidelitySettings) -> tuple[list[PolicyCheck], dict[str, Any]]:
    s.out_dir.mkdir(parents=True, exist_ok=True)
    config_path = s.out_dir / "gateway.yaml"
    config_path.write_text(yaml.safe_dump(s.gateway_config), encoding="utf-8")
    base = SimSettings(replicas=s.replicas, seed=s.sim_seed, **load_config(config_path))
    settle_s = SETTLE_SCRAPES * base.scrape_interval_s
    cases = [build_case(s, name) for name in s.cases]
    speedup = 1 / s.slowdown
    mooncake = build_case(replace(s, mooncake_requests=0), "mooncake")  # its fleet, no trace
    _log(f"fidelity: probing the time outside the engines ({s.replicas} idle replicas)")
    overheads = await probe_overheads(
        Fleet(s.replicas, mooncake.profile_name, MODEL, speedup, mooncake.emulator_args),
        config_path,
        settle_s,
        s.out_dir,
        mooncake.profile.config.block_size,
    )
    _log(
        f"  straight to a replica +{overheads.engine_overhead_s * 1000:.1f} ms, the gateway "
        f"+{overheads.gateway_overhead_s * 1000:.1f} ms "
        f"+{overheads.gateway_overhead_token_s * 1e6:.2f} us a prompt token"
    )
    settings = replace(
        base,
        gateway_overhead_s=overheads.gateway_overhead_s,
        gateway_overhead_token_s=overheads.gateway_overhead_token_s,
    )
    frontend = FrontEnd(request_overhead_s=overheads.engine_overhead_s)
    checks = []
    for case in cases:
        profile = replace(case.profile, frontend=frontend)
        if case.prefill:
            fleet, case_settings = pd_fleet(s, case, settings)
        else:
            fleet = LiveFleet(
                Fleet(s.replicas, case.profile_name, MODEL, speedup, case.emulator_args),
                config_path,
                settings.scrape_interval_s,
                s.out_dir,
            )
            case_settings = settings
        checks += await _run_case(s, case, profile, case_settings, fleet)
    header = _header(s, cases, overheads)
    return checks, header


def pd_fleet(
    s: FidelitySettings, case: Case, settings: SimSettings
) -> tuple[LiveFleet, SimSettings]:
    """A P/D case's live fleet and simulated settings: both read the gateway's config with a
    `disaggregation:` section (its mode) written beside the common one."""
    config = {**s.gateway_config, "disaggregation": {"protocol": "vllm", "mode": s.pd_mode}}
    path = s.out_dir / f"gateway-{case.name}.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    emulated = PdFleet(
        case.prefill, case.decode, case.profile_name, MODEL, 1 / s.slowdown,
        extra_args=case.emulator_args,
    )  # fmt: skip
    fleet = LiveFleet(emulated, path, settings.scrape_interval_s, s.out_dir, emulated.roles)
    pd = replace(
        settings,
        replicas=0,
        prefill=case.prefill,
        decode=case.decode,
        disaggregation=load_config(path)["disaggregation"],
    )
    return fleet, pd


async def _run_case(
    s: FidelitySettings, case: Case, profile: EngineProfile, settings: SimSettings, fleet: LiveFleet
) -> list[PolicyCheck]:
    """Live and simulated runs of `case`, one per policy and repetition (the repetitions
    outermost, so that a slow stretch of the machine falls on every policy alike);
    `profile`: the simulated engines'."""
    span = case.trace[-1].arrival_s if case.trace else 0.0
    runs = f"; {case.repeats} runs each" if case.repeats > 1 else ""
    fleet_text = f"{case.prefill} P + {case.decode} D" if case.prefill else str(s.replicas)
    _log(
        f"{case.name}: {len(case.trace)} requests over {span:.0f} s; {fleet_text} replicas "
        f"of {case.profile_name!r}{f' slowed {s.slowdown:g}x' if s.slowdown != 1 else ''}; "
        f"policies {', '.join(s.policies)}{runs}"
    )
    checks = []
    for k in range(case.repeats):
        trace = case.repetition(k)
        requests = timed_requests(trace, MODEL, include_usage=True)
        tag = f"{case.name}-{k + 1}" if case.repeats > 1 else case.name
        for policy in s.policies:
            _log(f"{tag} {policy}: live run")
            live = await run_live(fleet, policy, requests, tag=tag)
            started = time.perf_counter()
            check = check_policy(
                live, trace, profile, settings, case.name, repetition=k, prefill=case.prefill
            )
            _log(
                f"{tag} {policy}: simulated the trace and the recording in "
                f"{time.perf_counter() - started:.2f} s; mean TTFT live "
                f"{check.live_metrics.ttft_mean_s * 1000:.0f} ms, sim "
                f"{check.sim.metrics.ttft_mean_s * 1000:.0f} ms, sim on recording "
                f"{check.recorded.metrics.ttft_mean_s * 1000:.0f} ms"
            )
            checks.append(check)
    return checks


def _header(s: FidelitySettings, cases: list[Case], overheads: Overheads) -> dict[str, Any]:
    """What `fidelity.json` says about the run besides the per-policy results."""
    return {
        "cases": {
            c.name: {
                "requests": len(c.trace),
                "span_s": c.trace[-1].arrival_s if c.trace else 0.0,
                "profile": c.profile_name,
                "emulator_args": list(c.emulator_args),
                "block_tokens": c.profile.config.block_size,
                "repeats": c.repeats,
                "jitter_s": c.jitter_s,
                "prefill": c.prefill,
                "decode": c.decode,
            }
            for c in cases
        },
        "settings": {
            k: str(v) if isinstance(v, Path) else v
            for k, v in asdict(s).items()
            if k != "gateway_config"
        },
        "gateway_config": s.gateway_config,
        "overheads": asdict(overheads),
    }


def _parse(argv: list[str] | None) -> FidelitySettings:
    d = FidelitySettings()
    p = argparse.ArgumentParser(prog="python -m bench fidelity", description=__doc__)
    p.add_argument("--policies", default=",".join(d.policies))
    p.add_argument("--cases", default=",".join(d.cases), help=f"of {', '.join(CASES)}")
    p.add_argument("--replicas", type=int, default=d.replicas)
    p.add_argument("--profile", default=d.profile, help="engine profile of the chats case")
    p.add_argument("--sessions", type=int, default=d.sessions, help="chats in the trace")
    p.add_argument("--rate", type=float, default=d.rate_per_s, help="chats started per second")
    p.add_argument("--seed", type=int, default=d.seed, help="seed of the chats trace")
    p.add_argument("--traces", default=str(d.traces), help="folder of the Mooncake trace")
    p.add_argument(
        "--mooncake-requests", type=int, default=d.mooncake_requests, help="first N of the trace"
    )
    p.add_argument(
        "--mooncake-rate-scale",
        type=float,
        default=d.mooncake_rate_scale,
        help="Mooncake arrivals X times faster than recorded, for engines at full speed "
        "(default %(default)g; divided by --slowdown)",
    )
    p.add_argument(
        "--loaded-rate-scale",
        type=float,
        default=d.loaded_rate_scale,
        help="the loaded case's Mooncake arrivals X times faster than recorded, for engines "
        "at full speed (default %(default)g)",
    )
    p.add_argument(
        "--loaded-repeats",
        type=int,
        default=d.loaded_repeats,
        help="live runs per policy in the loaded case (default %(default)d)",
    )
    p.add_argument(
        "--loaded-jitter",
        type=float,
        default=d.loaded_jitter_s,
        help="each loaded repetition's arrivals shifted by up to S seconds, seeded by the "
        "repetition (default %(default)g)",
    )
    p.add_argument(
        "--slowdown",
        type=float,
        default=d.slowdown,
        help="engines and arrivals X times slower on both sides (default %(default)g)",
    )
    p.add_argument("--out", default=str(d.out_dir))
    a = p.parse_args(argv)
    return replace(
        d,
        policies=tuple(x for x in a.policies.split(",") if x),
        cases=tuple(x for x in a.cases.split(",") if x),
        replicas=a.replicas,
        profile=a.profile,
        sessions=a.sessions,
        rate_per_s=a.rate,
        seed=a.seed,
        traces=Path(a.traces),
        mooncake_requests=a.mooncake_requests,
        mooncake_rate_scale=a.mooncake_rate_scale,
        loaded_rate_scale=a.loaded_rate_scale,
        loaded_repeats=a.loaded_repeats,
        loaded_jitter_s=a.loaded_jitter,
        slowdown=a.slowdown,
        out_dir=Path(a.out),
    )


def main(argv: list[str] | None = None) -> int:
    settings = _parse(argv)
    started = time.monotonic()
    checks, header = asyncio.run(run_check(settings))
    header["wall_s"] = time.monotonic() - started
    print()
    print(format_report(checks, header["overheads"]))
    paths = [write_json(header, checks, settings.out_dir)]
    try:
        paths.append(write_plot(checks, settings.out_dir))
    except PlotsUnavailable:
        print(PLOTS_SKIPPED)
    print(f"\nwrote {', '.join(map(str, paths))} in {header['wall_s']:.0f} s")
    return 1 if any(c.live.errors for c in checks) else 0


if __name__ == "__main__":
    sys.exit(main())
