"""The regime map's ratios, JSON and heat maps, on made-up results."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from bench.regime import report


def _row(mode: str, cell: str, router: str, policy: str, mean: float, p90: float) -> Any:
    return {
        "cell": cell,
        "mode": mode,
        "router": router,
        "policy": policy,
        "requests": 10,
        "errors": 0,
        "ttft_mean_s": mean,
        "ttft_p50_s": mean / 2,
        "ttft_p90_s": p90,
        "hit_rate": 0.5 if router == "kvgate" else 0.6,
        "max_mean_share": 1.25,
        "load": 0.8,
    }


def _cell(name: str, row: str, pressure: float) -> dict[str, Any]:
    return {"name": name, "row": row, "pressure": pressure}


CELLS = [_cell("a", "hot · closed16", 0.25), _cell("b", "hot · closed16", 4.0)]
ROWS = [
    _row("live", "a", "kvgate", "prefix-aware", 1.0, 2.0),
    _row("live", "a", "sglang-router", "cache_aware", 0.5, 4.0),
    _row("live", "a", "kvgate", "round-robin", 2.0, 2.0),
    _row("live", "b", "kvgate", "prefix-aware", 3.0, 3.0),
    _row("live", "b", "sglang-router", "cache_aware", 2.0, 6.0),
    _row("sim", "a", "kvgate", "prefix-aware", 1.0, 1.0),
    _row("sim", "a", "kvgate", "round-robin", 4.0, 2.0),
    _row("sim", "b", "kvgate", "round-robin", 1.0, 1.0),  # no default: no ratio
]


def test_ratios_of_the_default_to_each_baseline_per_mode_and_cell() -> None:
    got = {
        (t["mode"], t["cell"], t["baseline"]): (t["ttft_mean_ratio"], t["ttft_p90_ratio"])
        for t in report.ratios(ROWS)
    }
    assert got == {
        ("live", "a", "sglang-router cache_aware"): (2.0, 0.5),
        ("live", "a", "kvgate round-robin"): (0.5, 1.0),
        ("live", "b", "sglang-router cache_aware"): (1.5, 0.5),
        ("sim", "a", "kvgate round-robin"): (0.25, 0.5),
    }
    first = report.ratios(ROWS)[0]
    assert first["hit_rate_diff_points"] == pytest.approx(-10.0)
    assert (first["max_mean_share"], first["baseline_max_mean_share"]) == (1.25, 1.25)


def test_json_holds_cells_rows_and_ratios(tmp_path: Path) -> None:
    doc = {"cells": CELLS, "rows": ROWS, "ratios": report.ratios(ROWS), "failed": []}
    path = report.write_json(doc, tmp_path / "out")
    back = orjson.loads(path.read_bytes())
    assert path.name == "regime.json" and set(back) == {"cells", "rows", "ratios", "failed"}
    assert len(back["rows"]) == 8 and len(back["ratios"]) == 4
    assert "ttft_mean_s" in back["rows"][0] and "ttft_p90_ratio" in back["ratios"][0]


def test_tables_name_every_row_and_ratio() -> None:
    rows = report.format_rows(ROWS).splitlines()
    assert len(rows) == 1 + len(ROWS) and "sglang-router cache_aware" in rows[2]
    assert "2.00" in report.format_ratios(report.ratios(ROWS)).splitlines()[2]


def test_heatmaps_per_mode_and_baseline(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    paths = report.write_heatmaps(CELLS, report.ratios(ROWS), tmp_path)
    assert [p.name for p in paths] == [
        "heatmap_live_vs_sglang-router.png",
        "heatmap_live_vs_round-robin.png",
        "heatmap_sim_vs_round-robin.png",
    ]
    assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in paths)


def test_repeated_runs_are_averaged_and_their_ratios_ranged() -> None:
    rows = [
        {**_row("live", "a", "kvgate", "prefix-aware", 1.0, 2.0), "seed": 1},
        {**_row("live", "a", "sglang-router", "cache_aware", 2.0, 2.0), "seed": 1},
        {**_row("live", "a", "kvgate", "prefix-aware", 3.0, 2.0), "seed": 2},
        {**_row("live", "a", "sglang-router", "cache_aware", 2.0, 4.0), "seed": 2},
    ]
    [t] = report.ratios(rows, {"a": 0.7})
    assert t["runs"] == 2
    assert t["ttft_mean_ratio"] == pytest.approx(1.0)  # means 2.0 ÷ 2.0
    assert t["ttft_mean_ratio_range"] == [0.5, 1.5]
    assert t["ttft_p90_ratio"] == pytest.approx(2.0 / 3.0)
    assert t["hit_rate"] == 0.5 and t["hit_ceiling"] == 0.7
    text = report.format_ratios([t])
    assert "0.50–1.50" in text and "70.0%" in text
