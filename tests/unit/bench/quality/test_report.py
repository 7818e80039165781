"""The quality benchmark's target verdicts."""

from __future__ import annotations

from typing import Any

from bench.quality.report import targets


def _row(workload: str, router: str, policy: str, mean: float, p90: float, hit: float) -> Any:
    return {
        "workload": workload,
        "router": router,
        "policy": policy,
        "ttft_mean_s": mean,
        "ttft_p90_s": p90,
        "hit_rate": hit,
    }


def test_targets_compare_kvgate_with_sglang_and_round_robin_per_workload() -> None:
    rows = [
        _row("w", "kvgate", "prefix-aware", 1.0, 2.0, 0.5),
        _row("w", "kvgate", "round-robin", 4.0, 3.0, 0.1),
        _row("w", "sglang-router", "cache_aware", 1.25, 2.4, 0.6),
    ]
    verdicts = {t["target"]: (round(t["value"], 3), t["met"]) for t in targets(rows)}
    assert verdicts == {
        "ttft_mean_s kvgate/sglang-router cache_aware <= 0.8": (0.8, True),
        "ttft_p90_s kvgate/sglang-router cache_aware <= 0.8": (0.833, False),
        "ttft_mean_s kvgate/kvgate round-robin <= 0.5": (0.25, True),
        "ttft_p90_s kvgate/kvgate round-robin <= 0.5": (0.667, False),
        "hit_rate kvgate >= sglang-router cache_aware": (-0.1, False),
    }


def test_no_targets_without_kvgate_prefix_aware() -> None:
    assert targets([_row("w", "kvgate", "round-robin", 1.0, 1.0, 0.1)]) == []
