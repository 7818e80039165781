from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from bench.regime.grid import FleetSpec
from bench.tune.fidelity import observed, summary
from bench.tune.phases import Phase, requests, trace

PHASES = [Phase("a", 0.5, "uniform", 4.0, 10.0), Phase("b", 2.0, "zipf", 6.0, 10.0)]


def test_the_trace_and_the_live_requests_are_the_same_turns_in_the_same_order() -> None:
    sent = requests(PHASES, FleetSpec(), 1)
    replayed = trace(PHASES, FleetSpec(), 1)
    assert len(sent) == len(replayed) > 20
    assert [r.at_s for r in sent] == [r.arrival_s for r in replayed]


def test_a_run_s_ttfts_land_on_their_requests(tmp_path: Path) -> None:
    replayed = trace(PHASES, FleetSpec(), 1)[:3]
    rows = [("req-2", 0.3, None), ("req-0", 0.1, None), ("req-1", 9.0, "HTTP 503")]
    (tmp_path / "run.json").write_bytes(orjson.dumps({"results": rows}))
    assert [r.ttft_s for r in observed(tmp_path / "run.json", replayed)] == [0.1, None, 0.3]


def test_the_summary_counts_signs_of_predicted_gains_of_5pct_or_more() -> None:
    def run(fid: float, predicted: float, measured: float) -> dict[str, Any]:
        return {"fidelity": fid, "predicted_gain": {"b": predicted},
                "measured_gain": {"b": measured}}  # fmt: skip

    rows = [
        {"end_s": 60.0, "runs": {"a": run(0.8, 0.20, 0.10)}},  # agrees
        {"end_s": 120.0, "runs": {"a": run(0.6, 0.20, -0.10)}},  # disagrees
        {"end_s": 180.0, "runs": {"a": run(1.0, 0.01, -0.30)}},  # too small to count
    ]
    s = summary(rows)["a"]
    assert s["fidelity_mean"] == pytest.approx(0.8) and s["fidelity_range"] == [0.6, 1.0]
    assert s["windows_with_a_predicted_gain_of_5pct"] == 2 and s["sign_agreement"] == 0.5
