"""The fidelity check's table, `fidelity.json` and `fidelity_ttft_cdf.png`."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson

from bench.fidelity.check import PolicyCheck, PolicySeries, series
from bench.fidelity.compare import Errors, RunMetrics
from sim.plots import pyplot

BOUND = 0.10  # the target: mean and p90 TTFT within 10% of live, from trace and recording

EXPLANATION = """\
live:           client-side TTFT through the gateway; hit rate from the replicas' own
                vllm:prefix_cache_hits/queries counters (deltas over the run)
sim: trace      the simulator on the trace the load generator sent, at its scheduled times
sim: recording  the simulator on the file `kvgate serve --record` wrote during the live run
                (arrivals as the gateway saw them; token counts and block hashes, no text)
                both add the probed time outside the engines to every TTFT
err:            |sim - live| / live; hit rate also as |sim - live| in percentage points
#k, mean of N:  a case run N times per policy (each with its own arrival jitter, the same on
                both sides): its runs, then the mean over them of each run's mean, p90 and
                hit rate, which the 10% bound applies to"""


def _pct(x: float) -> str:
    return "n/a" if math.isnan(x) else f"{x:.1%}"


def _row(policy: str, label: str, m: RunMetrics, e: Errors | None) -> str:
    cells = (
        f"{policy:<24}{label:<22}{m.requests:>5}{m.ttft_mean_s:>10.3f}{m.ttft_p90_s:>9.3f}"
        f"{_pct(m.hit_rate):>8}"
    )
    if e is None:
        return cells
    return (
        cells + f"{_pct(e.ttft_mean):>10}{_pct(e.ttft_p90):>9}{_pct(e.hit_rate):>9}"
        f" ({e.hit_rate_points:.1f} pts)"
    )


def _notes(c: PolicyCheck, label: str) -> list[str]:
    """Where the TTFT error comes from, and what the recording held. On a P/D pool the
    engines' TTFT histograms pool P's legs and D's: no split of the client's TTFT."""
    ms = 1000
    match = "equal" if c.recorded_tokens_match else "DIFFER from"
    engines = f"engines' own mean TTFT {c.live.engine_ttft_mean_s * ms:.1f} ms"
    outside = [
        f"  HTTP + gateway + client add {c.client_overhead_s * ms:.1f} ms a request "
        f"(client mean - engines' mean); modelled from the probe: "
        f"{c.modelled_outside_s * ms:.1f} ms"
    ]
    if c.prefill:
        engines += " (P's and D's legs pooled: not compared)"
        outside = []
    else:
        engines += f" (simulated engines vs it: {_pct(c.engine_ttft_error)})"
    return [
        f"{label}: live {c.live.wall_s:.0f} s, {c.live.errors} errors, load average "
        f"{c.live.load_average:.1f}; {engines}",
        f"  engines' mean ITL {c.live.engine_itl_mean_s * ms:.1f} ms vs simulated "
        f"{c.sim.itl_mean_s * ms:.1f} ms: emulated steps ran {c.step_stretch:.2f}x as long as "
        "modelled",
        *outside,
        f"  arrivals at the gateway jitter {c.jitter.mean_s * ms:.1f} ms mean, "
        f"{c.jitter.p99_s * ms:.1f} ms p99, {c.jitter.max_s * ms:.1f} ms max",
        f"  recording: {c.recorded_requests} requests, token counts {match} the trace's",
        *_split_note(c),
    ]


def _split_note(c: PolicyCheck) -> list[str]:
    shares = c.split_shares()
    if shares is None:
        return []
    live, sim, recorded = (_pct(x) for x in shares)
    return [f"  P/D: requests split live {live}, sim: trace {sim}, sim: recording {recorded}"]


def _name(c: PolicyCheck | PolicySeries) -> str:
    return f"{c.case}/{c.policy}"


def _run(c: PolicyCheck, runs: int) -> str:
    """` #k` for repetition k of a case run `runs` times, else nothing."""
    return f" #{c.repetition + 1}" if runs > 1 else ""


def _rows(g: PolicySeries) -> list[str]:
    """Each run's three rows (`#k` for repetitions), then, for repetitions, their means."""
    name, n = _name(g), len(g.checks)
    lines = []
    for c in g.checks:
        k = _run(c, n)
        lines += [
            _row(name, "live" + k, c.live_metrics, None),
            _row(name, "sim: trace" + k, c.sim.metrics, c.sim_errors),
            _row(name, "sim: recording" + k, c.recorded.metrics, c.recorded_errors),
        ]
    if n > 1:
        lines.append(_row(name, f"live, mean of {n}", g.live_metrics, None))
        lines.append(_row(name, f"sim: trace, mean of {n}", g.sim_metrics, g.sim_errors))
        lines.append(_row(name, f"sim: rec., mean of {n}", g.recorded_metrics, g.recorded_errors))
    return lines


def _verdict(checks: Sequence[PolicyCheck]) -> str:
    """Which TTFT errors exceed BOUND (NaN counts as exceeding); a case with repetitions is
    judged on the means over them."""
    over = [
        f"{_name(c)} {label} {what} {_pct(err)}"
        for c in series(checks)
        for label, e in (("trace", c.sim_errors), ("recording", c.recorded_errors))
        for what, err in (("mean", e.ttft_mean), ("p90", e.ttft_p90))
        if not err <= BOUND
    ]
    if not over:
        return f"every TTFT mean and p90 error within {BOUND:.0%}"
    return f"over {BOUND:.0%}: " + "; ".join(over)


def _probe(overheads: dict[str, Any]) -> str:
    ms = 1000

    def run(name: str) -> str:
        client, engines = overheads[name]
        return f"{client * ms:.1f} vs {engines * ms:.1f} ms"

    return (
        f"probe ({overheads['requests']} requests a run, one at a time, idle fleet; client "
        f"mean TTFT vs the engines'): small prompts straight to a replica "
        f"{run('small_direct')}, through the gateway {run('small_gateway')}, long prompts "
        f"through the gateway {run('long_gateway')}: the emulator's API server "
        f"+{overheads['engine_overhead_s'] * ms:.1f} ms, the gateway "
        f"+{overheads['gateway_overhead_s'] * ms:.1f} ms "
        f"+{overheads['gateway_overhead_token_s'] * 1e6:.2f} us a prompt token"
    )


def format_report(checks: Sequence[PolicyCheck], overheads: dict[str, Any] | None = None) -> str:
    header = (
        f"{'case/policy':<24}{'run':<22}{'reqs':>5}{'TTFT mean':>10}{'p90':>9}{'hit':>8}"
        f"{'err mean':>10}{'err p90':>9}{'err hit':>9}"
    )
    lines = [header, "-" * (len(header) + 11)]
    for g in series(checks):
        lines += _rows(g)
    lines += ["", _verdict(checks)]
    if overheads is not None:
        lines += ["", _probe(overheads)]
    for g in series(checks):
        for c in g.checks:
            lines += ["", *_notes(c, _name(c) + _run(c, len(g.checks)))]
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
        "case": c.case,
        "policy": c.policy,
        "repetition": c.repetition,
        "pd_split_shares": c.split_shares(),  # live, sim: trace, sim: recording (P/D only)
        "modelled_outside_s": c.modelled_outside_s,
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
            "engines_ttft_mean_rel_vs_engines": c.engine_ttft_error,
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


def series_json(g: PolicySeries) -> dict[str, Any]:
    """What a (case, policy) is judged on: each side's means over its runs, the errors of
    those, and the range of each run's mean and p90 TTFT."""

    def side(runs: list[RunMetrics], m: RunMetrics) -> dict[str, Any]:
        return {
            **_metrics(m),
            "ttft_mean_s_range": [
                min(r.ttft_mean_s for r in runs),
                max(r.ttft_mean_s for r in runs),
            ],
            "ttft_p90_s_range": [min(r.ttft_p90_s for r in runs), max(r.ttft_p90_s for r in runs)],
        }

    return {
        "case": g.case,
        "policy": g.policy,
        "runs": len(g.checks),
        "live": side([c.live_metrics for c in g.checks], g.live_metrics),
        "sim_trace": {
            **side([c.sim.metrics for c in g.checks], g.sim_metrics),
            "errors_vs_live": _errors(g.sim_errors),
        },
        "sim_recording": {
            **side([c.recorded.metrics for c in g.checks], g.recorded_metrics),
            "errors_vs_live": _errors(g.recorded_errors),
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
    doc = _clean(
        {
            **header,
            "series": [series_json(g) for g in series(checks)],
            "policies": [check_json(c) for c in checks],
        }
    )
    path.write_bytes(orjson.dumps(doc, option=orjson.OPT_INDENT_2))
    return path


def write_plot(checks: Sequence[PolicyCheck], out_dir: Path) -> Path:
    """TTFT CDFs, one panel per policy: live, sim on the trace, sim on the recording."""
    plt = pyplot()
    from matplotlib.ticker import NullFormatter

    out_dir.mkdir(parents=True, exist_ok=True)
    cases = list(dict.fromkeys(c.case for c in checks))
    policies = list(dict.fromkeys(c.policy for c in checks))
    rows, cols = max(1, len(cases)), max(1, len(policies))
    fig, axes = plt.subplots(rows, cols, figsize=(6 * cols, 4.5 * rows), squeeze=False)
    for c in checks:  # a case's repetitions share a panel, one curve each; the first labelled
        ax = axes[cases.index(c.case)][policies.index(c.policy)]
        curves = (
            ("live (client)", c.live.ttfts_s, c.live_metrics, "-", "C0"),
            ("sim: trace", c.sim.ttfts_s, c.sim.metrics, "--", "C1"),
            ("sim: recording", c.recorded.ttfts_s, c.recorded.metrics, ":", "C2"),
        )
        for label, xs, m, style, color in curves:
            if xs:
                ys = [(i + 1) / len(xs) for i in range(len(xs))]
                text = f"{label}: mean {m.ttft_mean_s * 1000:.0f} ms, hit {_pct(m.hit_rate)}"
                if c.repetition:
                    text = "_nolegend_"
                ax.step(xs, ys, style, color=color, where="post", label=text, alpha=0.8)
        ax.set_xscale("log")
        ax.xaxis.set_minor_formatter(NullFormatter())  # minor labels overlap on short ranges
        ax.set_title(f"{_name(c)}: TTFT, live vs simulated")
        ax.set_xlabel("time to first token (s, log scale)")
        ax.set_ylabel("fraction of requests")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    path = out_dir / "fidelity_ttft_cdf.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
