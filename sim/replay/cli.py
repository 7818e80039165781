"""`kvgate sim`: replay a trace once per policy, print the table, write summary and plots.

`kvgate.cli.sim` adds the options and calls `run_sim` (imported only when `sim` runs).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, TextIO

from routing.config.disaggregation import DisaggregationSection
from routing.traces import FORMATS, TraceRequest, load_trace
from sim.engine.kv_store import NATIVE_BUILT
from sim.engine.profiles import get_profile
from sim.engine.types import EngineProfile
from sim.plots import PLOTS_SKIPPED, PlotsUnavailable
from sim.replay.outcomes import ReplayResult
from sim.replay.report import (
    PolicySummary,
    format_pd,
    format_table,
    summarize,
    write_plots,
    write_summary,
)
from sim.replay.settings import SimSettings, load_config
from sim.replay.simulator import Replay
from sim.traces import time_scaled

DEFAULT_POLICIES = ("round-robin", "least-load", "prefix-aware", "oracle")
DEFAULT_REPLICAS = 8
DEFAULT_PROFILE = "h100-llama3-8b"
PROGRESS_EVERY_S = 2.0
PURE_PYTHON_NOTE = (
    "note: the compiled KV cache is not built (no C compiler when kvgate was installed): "
    "the pure-Python engine runs, with the same results, about twice as slowly"
)


def fit_profile(profile: EngineProfile, trace: Sequence[TraceRequest]) -> tuple[EngineProfile, str]:
    """Raise the profile's max_model_len to the trace's longest request (up to the KV cache
    size), so that long-context traces run on profiles of short-context models; a note says
    so ("" if nothing changed)."""
    config = profile.config
    longest = max((r.input_tokens + max(1, r.output_tokens) for r in trace), default=0)
    if longest <= config.max_model_len:
        return profile, ""
    fitted = min(longest, config.num_blocks * config.block_size)
    note = (
        f"note: max_model_len raised from {config.max_model_len:,} to {fitted:,} tokens "
        f"to fit the trace's longest request ({longest:,} tokens)"
    )
    return replace(profile, config=replace(config, max_model_len=fitted)), note


def with_block_size(profile: EngineProfile, block_size: int | None) -> tuple[EngineProfile, str]:
    """The profile with KV blocks of `block_size` tokens (vLLM's --block-size), the same KV
    capacity in tokens; a note says so ("" if nothing changed). Larger blocks mean less
    work per request (the Dynamo mocker uses 64) and a coarser prefix cache."""
    config = profile.config
    if block_size is None or block_size == config.block_size:
        return profile, ""
    if block_size < 1:
        raise ValueError("--block-size must be >= 1")
    blocks = config.num_blocks * config.block_size // block_size
    note = f"note: KV blocks of {block_size} tokens ({blocks:,} blocks), not {config.block_size}"
    return replace(profile, config=replace(config, block_size=block_size, num_blocks=blocks)), note


def replay_policy(
    trace: Sequence[TraceRequest],
    policy: str,
    profile: EngineProfile,
    settings: SimSettings,
    out: TextIO | None = None,
) -> tuple[ReplayResult, float, float]:
    """One replay, timed (wall and CPU seconds); progress lines to `out` every ~2 s."""
    started = last = time.perf_counter()
    cpu = time.process_time()

    def progress(now: float, done: int, total: int) -> None:
        nonlocal last
        wall = time.perf_counter()
        if out is not None and wall - last >= PROGRESS_EVERY_S:
            last = wall
            print(
                f"  {policy}: virtual {now:,.0f} s, {done:,}/{total:,} requests done, "
                f"{wall - started:.1f} s",
                file=out,
                flush=True,
            )

    result = Replay(trace, policy, profile, settings, progress=progress).run()
    return result, time.perf_counter() - started, time.process_time() - cpu


def load_inputs(args: argparse.Namespace) -> tuple[list[TraceRequest], EngineProfile, list[str]]:
    """The trace at its own rate and the engine profile (`--block-size`, fitted to the trace),
    with notes on what was changed; ValueError for a bad format or profile name."""
    if args.format not in FORMATS:
        raise ValueError(f"--format must be one of {', '.join(FORMATS)}, got {args.format!r}")
    try:
        profile = get_profile(args.profile)
    except KeyError as exc:
        raise ValueError(str(exc.args[0])) from None
    trace = load_trace(args.trace, args.format, args.limit)
    profile, block_note = with_block_size(profile, getattr(args, "block_size", None))
    profile, note = fit_profile(profile, trace)
    speed_note = "" if NATIVE_BUILT else PURE_PYTHON_NOTE
    return trace, profile, [line for line in (block_note, note, speed_note) if line]


def gateway_settings(args: argparse.Namespace) -> dict[str, Any]:
    """SimSettings keyword arguments for `--gateways`, `--sync-delay`, `--no-shared`,
    `--spread`; ValueError when they contradict each other."""
    gateways = getattr(args, "gateways", 1)
    delay = getattr(args, "sync_delay", None)
    shared = not getattr(args, "no_shared", False)
    if gateways < 1:
        raise ValueError("--gateways must be >= 1")
    if delay is not None and not shared:
        raise ValueError("--sync-delay and --no-shared contradict each other")
    if delay is not None and delay < 0:
        raise ValueError("--sync-delay must be >= 0")
    out: dict[str, Any] = {
        "gateways": gateways,
        "shared": shared,
        "spread": getattr(args, "spread", "request"),
    }
    if delay is not None:
        out["sync_delay_s"] = delay
    return out


def fleet_settings(args: argparse.Namespace, config: dict[str, Any]) -> dict[str, Any]:
    """SimSettings keyword arguments for `--replicas`, `--prefill`, `--decode`, `--pd-*`, over
    the config file's (`config`); ValueError when they contradict each other."""
    prefill, decode = getattr(args, "prefill", 0), getattr(args, "decode", 0)
    replicas = args.replicas
    if replicas is None:
        replicas = 0 if prefill or decode else DEFAULT_REPLICAS
    if min(replicas, prefill, decode) < 0:
        raise ValueError("--replicas, --prefill and --decode must be >= 0")
    if decode and not prefill:
        raise ValueError("--decode needs --prefill: decode replicas take prefilled requests")
    if prefill and not replicas + decode:
        raise ValueError("--prefill needs replicas that decode: --decode M or --replicas K")
    if replicas + prefill + decode < 1:
        raise ValueError("--replicas must be >= 1")
    flags = {"protocol": getattr(args, "pd_protocol", None), "mode": getattr(args, "pd_mode", None)}
    changes = {k: v for k, v in flags.items() if v is not None}
    link = (getattr(args, "transfer_bandwidth", None), getattr(args, "transfer_latency", None))
    if not prefill and (changes or link != (None, None)):
        raise ValueError("--pd-protocol, --pd-mode and --transfer-* are for --prefill replicas")
    section = config.get("disaggregation", DisaggregationSection())
    return {
        "replicas": replicas,
        "prefill": prefill,
        "decode": decode,
        "disaggregation": section.model_copy(update=changes),
        **_data_parallel(args, prefill),
    }


def _data_parallel(args: argparse.Namespace, prefill: int) -> dict[str, Any]:
    """SimSettings keyword arguments for `--data-parallel-size` and `--dp-routing`."""
    size = getattr(args, "data_parallel_size", None) or 1
    routing = getattr(args, "dp_routing", None)
    if size < 1:
        raise ValueError("--data-parallel-size must be >= 1")
    if routing is not None and size == 1:
        raise ValueError("--dp-routing is for --data-parallel-size N > 1")
    if routing == "engine" and prefill:
        raise ValueError("--dp-routing engine is not simulated on a P/D pool (ranks: rank)")
    return {"data_parallel_size": size, "dp_routing": routing or "rank"}


def with_link(profile: EngineProfile, args: argparse.Namespace) -> tuple[EngineProfile, str]:
    """The profile with the P/D link of `--transfer-bandwidth` and `--transfer-latency`; a note
    says so ("" if nothing changed)."""
    bandwidth = getattr(args, "transfer_bandwidth", None)
    latency = getattr(args, "transfer_latency", None)
    if bandwidth is None and latency is None:
        return profile, ""
    if bandwidth is not None and not bandwidth > 0:
        raise ValueError("--transfer-bandwidth must be > 0")
    if latency is not None and not latency >= 0:
        raise ValueError("--transfer-latency must be >= 0")
    link = profile.transfer
    link = replace(
        link,
        bandwidth_bytes_s=link.bandwidth_bytes_s if bandwidth is None else bandwidth,
        latency_s=link.latency_s if latency is None else latency,
    )
    note = (
        f"note: the P/D KV link moves {link.bandwidth_bytes_s / 1e9:g} GB/s after "
        f"{link.latency_s * 1e6:g} us a transfer ({link.bytes_per_token:,} bytes a token)"
    )
    return replace(profile, transfer=link), note


def describe_fleet(settings: SimSettings, profile: EngineProfile) -> str:
    """The fleet in a few words: `8 replicas`, or the P/D pool's roles and protocol."""
    n = settings.data_parallel_size
    ranks = ""
    if n > 1:
        who = "the gateway routes to ranks" if settings.dp_routing == "rank" else "engine-balanced"
        ranks = f" of {n} data-parallel ranks ({who})"
    if not settings.prefill:
        return f"{settings.replicas} replicas{ranks}"
    parts = [f"{settings.prefill} prefill", f"{settings.decode} decode"]
    if settings.replicas:
        parts.append(f"{settings.replicas} both")
    s = settings.disaggregation
    link = profile.transfer
    return (
        f"{' + '.join(parts)} replicas{ranks} (P/D {s.protocol}, {s.mode}; KV link "
        f"{link.bandwidth_bytes_s / 1e9:g} GB/s + {link.latency_s * 1e6:g} us)"
    )


def describe_gateways(settings: SimSettings) -> str:
    """One line on the gateways: how many, how requests reach them, what they share."""
    spread = "by session" if settings.spread == "session" else "round-robin by request"
    sharing = (
        f"each one's state reaches the others after {settings.sync_delay_s:g} s"
        if settings.shared
        else "sharing nothing"
    )
    return f"{settings.gateways} gateways, requests {spread}, {sharing}"


def run_sim(args: argparse.Namespace, out: TextIO = sys.stdout) -> int:
    """The `kvgate sim` command (argument names as `sim.replay.arguments` defines them)."""
    if args.rate_scale <= 0:
        raise ValueError("--rate-scale must be > 0")
    policies = [p for p in args.policies.split(",") if p] or list(DEFAULT_POLICIES)
    config = load_config(args.config)
    settings = SimSettings(
        seed=args.seed,
        slo_ttft_s=args.slo_ttft,
        slo_itl_s=args.slo_itl,
        kv_event_delay_s=args.kv_event_delay,
        gateway_overhead_s=args.gateway_overhead,
        gateway_overhead_token_s=args.gateway_overhead_token,
        **gateway_settings(args),
        **{**config, **fleet_settings(args, config)},
    )
    trace, profile, notes = load_inputs(args)
    profile, link_note = with_link(profile, args)
    notes += [link_note] if link_note else []
    if args.rate_scale != 1.0:
        trace = time_scaled(trace, args.rate_scale)
    span = trace[-1].arrival_s if trace else 0.0
    print(
        f"{len(trace):,} requests over {span:,.0f} s from {args.trace}; "
        f"{describe_fleet(settings, profile)} of {profile.name}; policies {', '.join(policies)}",
        file=out,
    )
    if settings.gateways > 1:
        print(describe_gateways(settings), file=out)
    for line in notes:
        print(line, file=out)
    results: list[ReplayResult] = []
    summaries: list[PolicySummary] = []
    for policy in policies:
        result, seconds, cpu = replay_policy(trace, policy, profile, settings, out)
        results.append(result)
        summaries.append(summarize(result, settings, seconds, cpu))
        print(f"  {policy}: {seconds:.2f} s ({cpu:.2f} s CPU)", file=out, flush=True)
    print(file=out)
    print(format_table(summaries), file=out)
    if pd := format_pd(summaries):
        print(pd, file=out)
    print(
        f"goodput: TTFT <= {settings.slo_ttft_s:g} s and mean ITL <= {settings.slo_itl_s:g} s",
        file=out,
    )
    out_dir = Path(args.out)
    paths = [write_summary(summaries, out_dir)]
    try:
        paths += write_plots(results, out_dir)
    except PlotsUnavailable:
        print(PLOTS_SKIPPED, file=out)
    print(f"wrote {', '.join(str(p) for p in paths)}", file=out)
    return 0
