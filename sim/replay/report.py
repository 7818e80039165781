"""Per-policy summaries of a replay: the table, `summary.json` and the plots.

Definitions:
- TTFT: arrival to first token; ITL: gaps between a request's consecutive tokens, pooled
  over every request (as vLLM's inter-token histogram); end-to-end: arrival to last token.
- hit rate: prompt tokens served from the prefix cache over prompt tokens looked up, summed
  over the engines (vLLM's `prefix_cache_hits / prefix_cache_queries`).
- goodput: the share of the trace's requests with TTFT ≤ the TTFT bound and mean ITL ≤ the
  ITL bound (a one-token answer meets any ITL bound); requests that could not run count
  against it.
- max/mean share: requests dispatched to the busiest replica over the mean per replica (a P/D
  request's legs count on both replicas).
- P/D (a fleet with prefill replicas, `pd`): the share of requests split, the planner's reasons,
  the mean KV transfer, each role's busy share; `summary.json` has `pd` only then.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import orjson

from routing.percentile import percentile
from sim.plots import pyplot
from sim.replay.disaggregation import PdSummary
from sim.replay.outcomes import ReplayResult
from sim.replay.settings import SimSettings


@dataclass(frozen=True, slots=True)
class PolicySummary:
    policy: str
    requests: int
    rejected: int
    ttft_mean_s: float
    ttft_p50_s: float
    ttft_p90_s: float
    ttft_p99_s: float
    itl_p50_s: float
    itl_p99_s: float
    e2e_mean_s: float
    e2e_p90_s: float
    hit_rate: float
    goodput: float
    max_mean_share: float
    requests_per_replica: tuple[int, ...]
    preemptions: int
    makespan_s: float
    engine_steps: int
    sim_seconds: float  # wall time of the replay
    sim_cpu_seconds: float  # CPU time of the replay (steadier on a busy machine)
    pd: PdSummary | None = None  # a P/D pool's


def summarize(
    result: ReplayResult, settings: SimSettings, sim_seconds: float, sim_cpu_seconds: float = 0.0
) -> PolicySummary:
    log = result.log
    ttft = sorted(log.ttft_s)
    e2e = sorted(log.e2e_s)
    good = sum(
        1
        for t, itl in zip(log.ttft_s, log.itl_mean_s, strict=True)
        if t <= settings.slo_ttft_s and not itl > settings.slo_itl_s
    )
    offered = result.requests + result.rejected
    shares = result.dispatched
    mean_share = sum(shares) / len(shares) if shares else 0.0
    return PolicySummary(
        policy=result.policy,
        requests=result.requests,
        rejected=result.rejected,
        ttft_mean_s=_mean(ttft),
        ttft_p50_s=percentile(ttft, 50),
        ttft_p90_s=percentile(ttft, 90),
        ttft_p99_s=percentile(ttft, 99),
        itl_p50_s=result.itl.percentile(50),
        itl_p99_s=result.itl.percentile(99),
        e2e_mean_s=_mean(e2e),
        e2e_p90_s=percentile(e2e, 90),
        hit_rate=result.prefix_hits / result.prefix_queries if result.prefix_queries else 0.0,
        goodput=good / offered if offered else 0.0,
        max_mean_share=max(shares) / mean_share if mean_share else 0.0,
        requests_per_replica=shares,
        preemptions=result.preemptions,
        makespan_s=result.makespan_s,
        engine_steps=result.steps,
        sim_seconds=sim_seconds,
        sim_cpu_seconds=sim_cpu_seconds,
        pd=result.pd,
    )


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else math.nan


_COLUMNS = (  # title, width, format, field; ITL columns are shown in ms
    ("policy", 16, "", "policy"),
    ("reqs", 6, "d", "requests"),
    ("TTFT p50", 8, ".3f", "ttft_p50_s"),
    ("p90", 7, ".3f", "ttft_p90_s"),
    ("p99", 7, ".3f", "ttft_p99_s"),
    ("ITL p50ms", 9, ".1f", "itl_p50_s"),
    ("p99ms", 7, ".1f", "itl_p99_s"),
    ("E2E mean", 8, ".2f", "e2e_mean_s"),
    ("p90", 7, ".2f", "e2e_p90_s"),
    ("hit", 6, ".1%", "hit_rate"),
    ("goodput", 7, ".1%", "goodput"),
    ("max/mean", 8, ".2f", "max_mean_share"),
    ("sim s", 6, ".2f", "sim_seconds"),
    ("cpu s", 6, ".2f", "sim_cpu_seconds"),
)


def format_table(summaries: Sequence[PolicySummary]) -> str:
    """The summaries as a fixed-width table (latencies in seconds, ITL in milliseconds)."""
    header = " ".join(
        title.ljust(width) if key == "policy" else title.rjust(width)
        for title, width, _, key in _COLUMNS
    )
    lines = [header, "-" * len(header)]
    for s in summaries:
        row = asdict(s)
        cells = []
        for _, width, spec, key in _COLUMNS:
            value = row[key] * 1000 if key.startswith("itl_") else row[key]
            text = format(value, spec)
            cells.append(text.ljust(width) if key == "policy" else text.rjust(width))
        lines.append(" ".join(cells))
    return "\n".join(lines)


def format_pd(summaries: Sequence[PolicySummary]) -> str:
    """One line per policy on a P/D pool: splits and why, transfers, busy shares ("" if none)."""
    lines = []
    for s in summaries:
        pd = s.pd
        if pd is None:
            continue
        why = ", ".join(f"{k} {v:,}" for k, v in pd.why.items())
        busy = ", ".join(f"{role} {share:.0%}" for role, share in pd.busy.items())
        lines.append(
            f"{s.policy}: split {pd.split:,}/{pd.planned:,} ({pd.split_share:.1%}; {why}); "
            f"transfer mean {pd.transfer_mean_s * 1000:.2f} ms, {pd.moved_blocks_mean:.1f} "
            f"blocks; busy {busy}"
        )
    if not lines:
        return ""
    return "\n".join(["P/D (requests split through a prefill replica, and why):", *lines])


def write_summary(summaries: Sequence[PolicySummary], out_dir: Path) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "summary.json"
    rows = [summary_row(s) for s in summaries]
    path.write_bytes(orjson.dumps(rows, option=orjson.OPT_INDENT_2))
    return path


def summary_row(s: PolicySummary) -> dict[str, object]:
    """A summary as JSON: NaN as null, `pd` only on a P/D pool."""
    row = asdict(s)
    if row["pd"] is None:
        del row["pd"]
    return {k: _json_value(v) for k, v in row.items()}


def _json_value(v: object) -> object:
    if isinstance(v, float) and math.isnan(v):
        return None
    if isinstance(v, dict):
        return {k: _json_value(x) for k, x in v.items()}
    return v


def write_plots(results: Sequence[ReplayResult], out_dir: Path) -> list[Path]:
    """`ttft_cdf.png` (one curve per policy) and `timeline.png` (per policy: hit rate and load
    per replica over time)."""
    plt = pyplot()

    out_dir.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for result in results:
        ttft = sorted(result.log.ttft_s)
        if ttft:
            n = len(ttft)
            ax.plot(ttft, [(i + 1) / n for i in range(n)], label=result.policy)
    ax.set_xscale("log")
    ax.set_xlabel("TTFT (s)")
    ax.set_ylabel("fraction of requests")
    ax.set_title("TTFT CDF")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    cdf = out_dir / "ttft_cdf.png"
    fig.tight_layout()
    fig.savefig(cdf, dpi=110)
    plt.close(fig)

    rows = max(1, len(results))
    fig, axes = plt.subplots(rows, 2, figsize=(12, 2.8 * rows), squeeze=False)
    for row, result in zip(axes, results, strict=False):
        times = list(result.timeline.times_s)
        for rid, hits, load in zip(
            result.replica_ids, result.timeline.hit_rate, result.timeline.load, strict=True
        ):
            row[0].plot(times, list(hits), lw=0.8, label=rid)
            row[1].plot(times, list(load), lw=0.8, label=rid)
        row[0].set_title(f"{result.policy}: prefix hit rate per replica (cumulative)")
        row[0].set_ylim(-0.02, 1.02)
        row[1].set_title(f"{result.policy}: running + waiting per replica")
        for ax in row:
            ax.set_xlabel("virtual time (s)")
            ax.grid(True, alpha=0.3)
    axes[0][1].legend(fontsize="x-small", ncol=2, loc="upper right")
    timeline = out_dir / "timeline.png"
    fig.tight_layout()
    fig.savefig(timeline, dpi=100)
    plt.close(fig)
    return [cdf, timeline]
