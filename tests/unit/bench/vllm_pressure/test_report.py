"""The real-vLLM pressure bench's figures, rows over repeats, ratios and files."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import orjson
import pytest

from bench.regime import report as regime_report
from bench.vllm_pressure import report
from sim.live.client import RequestResult
from sim.live.experiment import ExperimentResult, Router
from sim.live.scrape import ReplicaReport


def _run(router: str, policy: str, mean: float, repeat: int = 0, hit: float = 0.5) -> Any:
    return {
        "mode": "vllm",
        "cell": "c",
        "repeat": repeat,
        "seed": 1 + repeat,
        "router": router,
        "policy": policy,
        "requests": 10,
        "errors": 0,
        "ttft_mean_s": mean,
        "ttft_p50_s": mean / 2,
        "ttft_p90_s": 2 * mean,
        "ttft_p99_s": 3 * mean,
        "hit_rate": hit,
        "max_mean_share": 1.5,
        "preemptions": repeat,
        "throughput_rps": 5.0,
        "wall_s": 2.0,
    }


RUNS = [
    _run("kvgate", "prefix-aware", 1.0, 0, hit=0.6),
    _run("sglang-router", "cache_aware", 0.5, 0, hit=0.8),
    _run("kvgate", "prefix-aware", 3.0, 1, hit=0.4),
    _run("sglang-router", "cache_aware", 1.5, 1, hit=0.8),
]


def test_rows_average_the_repeats_and_keep_the_spread() -> None:
    rows = report.summarise(RUNS)
    assert [(r["router"], r["runs"]) for r in rows] == [("kvgate", 2), ("sglang-router", 2)]
    ours = rows[0]
    assert ours["mode"] == "vllm" and ours["cell"] == "c"
    assert ours["ttft_mean_s"] == 2.0 and ours["ttft_p90_s"] == 4.0
    assert ours["hit_rate"] == pytest.approx(0.5) and ours["preemptions"] == 0.5
    assert (ours["ttft_mean_min_s"], ours["ttft_mean_max_s"]) == (1.0, 3.0)


def test_ratios_to_sglang_router_come_from_the_regime_map() -> None:
    [ratio] = regime_report.ratios(RUNS)
    assert ratio["baseline"] == "sglang-router cache_aware" and ratio["runs"] == 2
    assert ratio["ttft_mean_ratio"] == 2.0 and ratio["ttft_p90_ratio"] == 2.0
    assert ratio["ttft_mean_ratio_range"] == [2.0, 2.0]
    assert ratio["hit_rate_diff_points"] == pytest.approx(-30.0)


def test_the_table_has_a_line_per_row() -> None:
    text = report.format_rows(report.summarise(RUNS))
    lines = text.splitlines()
    assert len(lines) == 3 and "max/mean" in lines[0]
    assert "kvgate prefix-aware" in lines[1] and "50.0%" in lines[1]


def test_figures_of_one_experiment() -> None:
    results = [RequestResult("a", t, t + 1, 200, None) for t in (0.1, 0.2, 0.3)]
    results.append(RequestResult("b", None, 1.0, 500, None, "boom"))
    replicas = [
        ReplicaReport("x", requests=3, prefix_queries=100, prefix_hits=50, preemptions=2),
        ReplicaReport("y", requests=1, prefix_queries=100, prefix_hits=0),
    ]
    result = ExperimentResult.of("l", results, replicas, 2.0, Router("u", {}, ("kvgate",)))
    got = report.figures(result)
    assert (got["requests"], got["errors"], got["error_samples"]) == (4, 1, ["boom"])
    assert got["ttft_mean_s"] == pytest.approx(0.2) and got["ttft_p90_s"] == 0.3
    assert got["hit_rate"] == 0.25 and got["max_mean_share"] == 1.5
    assert got["preemptions"] == 2 and got["requests_per_replica"] == [3, 1]
    assert got["command"] == ["kvgate"]


def test_json_and_bars(tmp_path: Path) -> None:
    rows = report.summarise(RUNS)
    path = report.write_json({"rows": rows, "nan": math.nan}, tmp_path / "out")
    assert path.name == "vllm-pressure.json"
    assert orjson.loads(path.read_bytes())["rows"][0]["runs"] == 2
    pytest.importorskip("matplotlib")
    bars = report.write_bars(rows, tmp_path / "bars.png", "t")
    assert bars.stat().st_size > 0
