"""`python -m bench sweep-runners` on a tiny trace: each runner's figures, the same results."""

from __future__ import annotations

import json
from pathlib import Path

from bench import sweep_runners
from tests.support.sweep_traces import tenant_trace_file


def test_local_runners_are_timed_and_agree(tmp_path: Path) -> None:
    traces = tmp_path / "traces"
    traces.mkdir()
    tenant_trace_file(traces / sweep_runners.MOONCAKE_TRACE, n=12)
    out = tmp_path / "out"
    argv = ["--traces", str(traces), "--limit", "12", "--runners", "jobs-1,jobs-2"]
    assert sweep_runners.main([*argv, "--out", str(out)]) == 0
    result = json.loads((out / "sweep_runners.json").read_text())
    rows = {r["runner"]: r for r in result["rows"]}
    assert list(rows) == ["jobs-1", "jobs-2"]
    assert rows["jobs-2"]["description"] == "local, 2 jobs"
    for row in rows.values():
        assert row["runs"] == 32 and row["same_results_as_first"]
        assert 0 < row["runs_seconds"] <= row["command_seconds"]
    assert (out / "sweep_runners.png").stat().st_size > 1000
    assert (out / "jobs-2" / "sweep.json").is_file()
