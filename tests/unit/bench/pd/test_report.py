"""The P/D benchmark's summaries over repeats, kvgate/peer ratios and targets, on made-up rows."""

from __future__ import annotations

import math
from typing import Any

import pytest

from bench.pd import report


def _row(cmp: str, cell: str, router: str, repeat: int, mean: float, p90: float, **kw: Any) -> Any:
    return {
        "comparison": cmp,
        "mode": kw.pop("mode", "live"),
        "cell": cell,
        "router": router,
        "repeat": repeat,
        "ttft_mean_s": mean,
        "ttft_p90_s": p90,
        "errors": kw.pop("errors", 0),
        **kw,
    }


ROWS = [
    _row("A", "load-0.5", "kvgate-pd", 0, 1.0, 2.0, decisions={"local/cached": 3}),
    _row("A", "load-0.5", "kvgate-pd", 1, 3.0, 2.0, decisions={"local/cached": 1}),
    _row("A", "load-0.5", "vllm-router-pd", 0, 2.0, 2.0),
    _row("A", "load-0.5", "vllm-router-pd", 1, 6.0, 2.0),
    _row("A", "load-0.5", "sglang-router-pd", 0, 2.0, 4.0),
    _row("A", "load-0.5", "sglang-router-pd", 1, 2.0, 4.0),
    _row("B", "mixed", "conditional", 0, 1.0, 2.0),
    _row("B", "mixed", "always", 0, 2.0, 2.0),
    _row("B", "mixed", "never", 0, 0.5, 2.0),
    _row("B", "mixed", "conditional", 0, 1.0, 2.0, mode="sim"),
    _row("B", "mixed", "always", 0, 2.0, 2.0, mode="sim"),
]


def test_summary_gives_each_figure_over_the_repeats() -> None:
    [ours] = [s for s in report.summary(ROWS) if s["router"] == "kvgate-pd"]
    assert ours["repeats"] == 2
    assert ours["ttft_mean_s"] == {
        "mean": 2.0,
        "sd": pytest.approx(math.sqrt(2)),
        "min": 1.0,
        "max": 3.0,
    }
    assert ours["decisions"] == {"local/cached": 4}
    assert "split_share" not in ours  # not measured in these rows


def test_summary_ignores_unmeasured_values() -> None:
    rows = [_row("A", "c", "r", k, 1.0, 1.0, split_share=v) for k, v in enumerate([None, 0.5])]
    [s] = report.summary(rows)
    assert s["split_share"]["mean"] == 0.5


def test_ratios_of_means_and_per_repeat() -> None:
    by = {(r["kvgate"], r["peer"]): r for r in report.ratios(ROWS)}
    vllm = by["kvgate-pd", "vllm-router-pd"]
    assert vllm["ttft_mean_s"] == pytest.approx(0.5)
    assert vllm["ttft_mean_s_per_repeat"] == pytest.approx([0.5, 0.5])
    assert by["kvgate-pd", "sglang-router-pd"]["ttft_p90_s"] == pytest.approx(0.5)
    assert ("kvgate-pd-sglang", "sglang-router-pd") not in by  # no such rows


def test_targets_verdicts() -> None:
    verdicts = {t["target"]: t["met"] for t in report.targets(ROWS)}
    assert verdicts["A load-0.5: ttft_mean_s kvgate-pd/vllm-router-pd <= 0.8"]
    assert not verdicts["A load-0.5: ttft_p90_s kvgate-pd/vllm-router-pd <= 0.9"]  # 1.0
    assert verdicts["A load-0.5: ttft_p90_s kvgate-pd/sglang-router-pd <= 0.9"]
    assert verdicts["A load-0.5: kvgate-pd errors == 0"]
    assert verdicts["B live: ttft_mean_s conditional < always"]
    assert not verdicts["B live: ttft_mean_s conditional < never"]
    assert verdicts["B sim: ttft_mean_s conditional < always"]
    assert "B sim: ttft_mean_s conditional < never" not in verdicts
