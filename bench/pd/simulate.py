"""Comparison B in the simulator: the live run's trace replayed on a simulated P/D pool.

The same trace (model time; live sends it `1 / speedup` slower) replayed once per mode on
`prefill` P and `decode` D replicas of the same profile, with kvgate's routing and P/D planner
(`sim.replay`, vLLM's protocol). Figures are converted to live seconds (÷ speedup) so that they
sit beside the live rows; each request's TTFT comes from the replay's observer, so the short
and long prompts are reported apart.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from bench.pd.live import KVGATE_POLICY
from bench.pd.workloads import is_long
from bench.regime.simulate import Timings
from routing.config.disaggregation import DisaggregationSection
from routing.percentile import percentile
from routing.traces import TraceRequest
from sim.engine.profiles import get_profile
from sim.replay import Replay, SimSettings

SPLIT_WHYS = ("faster", "mode_always", "cannot_prefill")  # the planner's reasons to use a P


def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs) if xs else math.nan


def replay(
    trace: Sequence[TraceRequest],
    mode: str,
    *,
    profile: str,
    prefill: int,
    decode: int,
    speedup: float,
) -> dict[str, Any]:
    """One mode's figures over `trace` (seconds ÷ `speedup`)."""
    settings = SimSettings(
        replicas=0,
        prefill=prefill,
        decode=decode,
        disaggregation=DisaggregationSection(protocol="vllm", mode=mode),
    )
    seen = Timings(len(trace))
    result = Replay(trace, KVGATE_POLICY, get_profile(profile), settings, observer=seen).run()
    scale = 1.0 / speedup
    ttfts = sorted(t * scale for t in seen.ttft if not math.isnan(t))
    itl = result.itl
    pd = result.pd
    out: dict[str, Any] = {
        "requests": result.requests,
        "errors": result.rejected,
        "ttft_mean_s": _mean(ttfts),
        "ttft_p50_s": percentile(ttfts, 50),
        "ttft_p90_s": percentile(ttfts, 90),
        "ttft_p99_s": percentile(ttfts, 99),
        "itl_mean_s": itl.total_s / itl.count * scale if itl.count else math.nan,
        "itl_p50_s": itl.percentile(50) * scale,
        "itl_p90_s": itl.percentile(90) * scale,
        "throughput_rps": result.requests / result.makespan_s / scale if result.makespan_s else 0.0,
        "hit_rate": result.prefix_hits / result.prefix_queries if result.prefix_queries else 0.0,
        "ttft_short_mean_s": _mean(
            [t * scale for r, t in zip(trace, seen.ttft, strict=True) if not is_long(r)]
        ),
        "ttft_long_mean_s": _mean(
            [t * scale for r, t in zip(trace, seen.ttft, strict=True) if is_long(r)]
        ),
    }
    if pd is not None:
        out["split_share"] = pd.split_share
        out["decisions"] = {
            f"{'split' if why in SPLIT_WHYS else 'local'}/{why}": n for why, n in pd.why.items()
        }
        out["transfer_mean_s"] = pd.transfer_mean_s * scale
        # The planner's learnt decode-leg line at the end: seconds + seconds per moved token.
        out["link_overhead_s"] = pd.link_overhead_s * scale
        out["link_token_s"] = pd.link_token_s * scale
        out["busy"] = dict(pd.busy)
    return out
