"""`ChaosFigures`: the summary gathers the issue's figures from the cases that measured them."""

from __future__ import annotations

import json
from pathlib import Path

from tests.chaos.figures import ChaosFigures, plot_latency


def test_summary_adds_up_the_cases(tmp_path: Path) -> None:
    figures = ChaosFigures()
    figures.record("killed", lost_not_started=0, streams_cut=4, sse_error_events_ok=4)
    figures.record("killed", p99_baseline_s=0.3, p99_fault_s=0.4, eject_s=0.1, readmit_s=0.2)
    figures.record("mid_event", streams_cut=6, sse_error_events_ok=5, rss_growth_mb=2.5)
    figures.record("burst", shed_fraction=0.9, fd_growth=3)
    figures.case("killed").outcome = "passed"
    figures.case("mid_event").outcome = "failed"
    figures.case("mid_event").failure = "AssertionError: 1 of 6 cut streams"
    summary = figures.summary()
    assert summary["requests lost that had not started streaming (target 0)"] == 0
    assert summary["well-formed SSE error events / streams cut after starting"] == "9/10"
    assert summary["p99 latency, killed: baseline -> during fault (s)"] == "0.3 -> 0.4"
    assert summary["gateway RSS growth, max over cases (MB)"] == 2.5
    assert summary["gateway open-fd growth, max over cases"] == 3
    assert summary["shed fraction in the 10x burst"] == 0.9
    table = figures.table()
    assert "1/3 cases passed" in table and "! AssertionError: 1 of 6 cut streams" in table
    figures.write(tmp_path / "chaos.json")
    written = json.loads((tmp_path / "chaos.json").read_text())
    assert written["cases"]["mid_event"]["outcome"] == "failed"


def test_nothing_measured_shows_as_none() -> None:
    summary = ChaosFigures().summary()
    assert summary["requests lost that had not started streaming (target 0)"] is None
    assert summary["well-formed SSE error events / streams cut after starting"] is None


def test_latency_plot_is_written(tmp_path: Path) -> None:
    figures = ChaosFigures()
    figures.record("hung", p99_baseline_s=0.05, p99_fault_s=1.04)
    assert plot_latency(figures, tmp_path / "chaos.png")
    assert (tmp_path / "chaos.png").stat().st_size > 0
    assert not plot_latency(ChaosFigures(), tmp_path / "none.png")
