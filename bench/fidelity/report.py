"""The fidelity check's table, `fidelity.json` and `fidelity_ttft_cdf.png`."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson

from bench.fidelity.check import PolicyCheck
from bench.fidelity.compare import Errors, RunMetrics
from sim.plots import pyplot

EXPLANATION = """\
live:           client-side TTFT through the gateway; hit rate from the replicas' own
                vllm:prefix_cache_hits/queries counters (deltas over the run)
sim: trace      the simulator on the trace the load generator sent, at its scheduled times
sim: recording  the simulator on the file `kvgate serve --record` wrote during the live run
                (arrivals as the gateway saw them; token counts and block hashes, no text)
err:            |sim - live| / live; hit rate also as |sim - live| in percentage points"""


def _pct(x: float) -> str:
    return "n/a" if math.isnan(x) else f"{x:.1%}"


def _row(policy: str, label: str, m: RunMetrics, e: Errors | None) -> str:
    cells = (
        f"{policy:<14}{label:<16}{m.requests:>5}{m.ttft_mean_s:>10.3f}{m.ttft_p90_s:>9.3f}"
        f"{_pct(m.hit_rate):>8}"
    )
    if e is None:
        return cells
    return (
        cells + f"{_pct(e.ttft_mean):>10}{_pct(e.ttft_p90):>9}{_pct(e.hit_rate):>9}"
        f" ({e.hit_rate_points:.1f} pts)"
    )


def _notes(c: PolicyCheck) -> list[str]:
    """Where the TTFT error comes from, and what the recording held."""
    ms = 1000
    match = "equal" if c.recorded_tokens_match else "DIFFER from"
    return [
        f"{c.policy}: live {c.live.wall_s:.0f} s, {c.live.errors} errors, load average "
        f"{c.live.load_average:.1f}; engines' own mean "
        f"TTFT {c.live.engine_ttft_mean_s * ms:.1f} ms (sim vs it: {_pct(c.engine_ttft_error)})",
        f"  engines' mean ITL {c.live.engine_itl_mean_s * ms:.1f} ms vs simulated "
        f"{c.sim.itl_mean_s * ms:.1f} ms: emulated steps ran {c.step_stretch:.2f}x as long as "
        "modelled",
        f"  HTTP + gateway + client add {c.client_overhead_s * ms:.1f} ms a request "
        "(client mean - engines' mean; not modelled)",
        f"  arrivals at the gateway jitter {c.jitter.mean_s * ms:.1f} ms mean, "
        f"{c.jitter.p99_s * ms:.1f} ms p99, {c.jitter.max_s * ms:.1f} ms max",
        f"  recording: {c.recorded_requests} requests, token counts {match} the trace's",
    ]


def format_report(checks: Sequence[PolicyCheck]) -> str:
    header = (
        f"{'policy':<14}{'run':<16}{'reqs':>5}{'TTFT mean':>10}{'p90':>9}{'hit':>8}"
        f"{'err mean':>10}{'err p90':>9}{'err hit':>9}"
    )
    lines = [header, "-" * (len(header) + 11)]
    for c in checks:
        lines.append(_row(c.policy, "live", c.live_metrics, None))
        lines.append(_row(c.policy, "sim: trace", c.sim.metrics, c.sim_errors))
        lines.append(_row(c.policy, "sim: recording", c.recorded.metrics, c.recorded_errors))
    for c in checks:
        lines += ["", *_notes(c)]
    return "\n".join(lines) + "\n\n" + EXPLANATION


def _metrics(m: RunMetrics) -> dict[str, Any]:
    return {
        "requests": m.requests,
        "ttft_mean_s": m.ttft_mean_s,
        "ttft_p90_s": m.ttft_p90_s,
        "hit_rate": m.hit_rate,
    }


def _errors(e: Errors) -> dict[str, float]:
    return {
        "ttft_mean_rel": e.ttft_mean,
        "ttft_p90_rel": e.ttft_p90,
        "hit_rate_rel": e.hit_rate,
        "hit_rate_points": e.hit_rate_points,
    }


def check_json(c: PolicyCheck) -> dict[str, Any]:
    live = c.live
    return {
        "policy": c.policy,
        "live": {
            **_metrics(c.live_metrics),
            "errors": live.errors,
            "wall_s": live.wall_s,
            "load_average": live.load_average,
            "engine_ttft_mean_s": live.engine_ttft_mean_s,
            "client_overhead_s": c.client_overhead_s,
            "engine_itl_mean_s": live.engine_itl_mean_s,
            "step_stretch": c.step_stretch,
            "prefix_hits": live.counters.prefix_hits,
            "prefix_queries": live.counters.prefix_queries,
            "requests_per_replica": list(live.requests_per_replica),
            "recording": str(live.record_path),
        },
        "sim_trace": {
            **_metrics(c.sim.metrics),
            "requests_per_replica": list(c.sim.requests_per_replica),
            "errors_vs_live": _errors(c.sim_errors),
            "ttft_mean_rel_vs_engines": c.engine_ttft_error,
            "itl_mean_s": c.sim.itl_mean_s,
        },
        "sim_recording": {
            **_metrics(c.recorded.metrics),
            "requests_per_replica": list(c.recorded.requests_per_replica),
            "errors_vs_live": _errors(c.recorded_errors),
            "recorded_requests": c.recorded_requests,
            "token_counts_match_trace": c.recorded_tokens_match,
            "arrival_jitter_mean_s": c.jitter.mean_s,
            "arrival_jitter_p99_s": c.jitter.p99_s,
            "arrival_jitter_max_s": c.jitter.max_s,
        },
        "ttfts_s": {
            "live": list(live.ttfts_s),
            "sim_trace": list(c.sim.ttfts_s),
            "sim_recording": list(c.recorded.ttfts_s),
        },
    }


def _clean(value: Any) -> Any:
    """NaN as null: JSON has no NaN."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_clean(v) for v in value]
    return value


def write_json(header: dict[str, Any], checks: Sequence[PolicyCheck], out_dir: Path) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "fidelity.json"
    doc = _clean({**header, "policies": [check_json(c) for c in checks]})
    path.write_bytes(orjson.dumps(doc, option=orjson.OPT_INDENT_2))
    return path


def write_plot(checks: Sequence[PolicyCheck], out_dir: Path) -> Path:
    """TTFT CDFs, one panel per policy: live, sim on the trace, sim on the recording."""
    plt = pyplot()
    from matplotlib.ticker import NullFormatter

    out_dir.mkdir(parents=True, exist_ok=True)
    n = max(1, len(checks))
    fig, axes = plt.subplots(1, n, figsize=(6 * n, 4.5), squeeze=False)
    for ax, c in zip(axes[0], checks, strict=False):
        curves = (
            ("live (client)", c.live.ttfts_s, c.live_metrics, "-"),
            ("sim: trace", c.sim.ttfts_s, c.sim.metrics, "--"),
            ("sim: recording", c.recorded.ttfts_s, c.recorded.metrics, ":"),
        )
        for label, xs, m, style in curves:
            if xs:
                ys = [(i + 1) / len(xs) for i in range(len(xs))]
                text = f"{label}: mean {m.ttft_mean_s * 1000:.0f} ms, hit {_pct(m.hit_rate)}"
                ax.step(xs, ys, style, where="post", label=text)
        ax.set_xscale("log")
        ax.xaxis.set_minor_formatter(NullFormatter())  # minor labels overlap on short ranges
        ax.set_title(f"{c.policy}: TTFT, live vs simulated")
        ax.set_xlabel("time to first token (s, log scale)")
        ax.set_ylabel("fraction of requests")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    path = out_dir / "fidelity_ttft_cdf.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
