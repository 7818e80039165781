from __future__ import annotations

import argparse
import io
import math
from pathlib import Path

import orjson
import pytest

from sim.replay import Replay, SimSettings, summarize
from sim.replay.cli import fit_profile, run_sim
from sim.replay.report import format_table, write_summary
from tests.unit.sim.replay.synthetic import SMALL, tenant_trace

SUMMARY_KEYS = {
    "policy",
    "requests",
    "ttft_p50_s",
    "ttft_p90_s",
    "ttft_p99_s",
    "itl_p50_s",
    "itl_p99_s",
    "hit_rate",
    "goodput",
    "max_mean_share",
    "sim_seconds",
}


def test_a_summary_has_the_numbers_the_issue_asks_for(tmp_path: Path) -> None:
    trace = tenant_trace(80, seed=4)
    settings = SimSettings(replicas=3, slo_ttft_s=0.05, slo_itl_s=0.02)
    summary = summarize(Replay(trace, "round-robin", SMALL, settings).run(), settings, 0.5)
    assert summary.requests == 80 and summary.sim_seconds == 0.5
    assert summary.ttft_p50_s <= summary.ttft_p90_s <= summary.ttft_p99_s
    assert 0 < summary.goodput < 1 and 0 < summary.hit_rate < 1
    assert summary.requests_per_replica == (27, 27, 26)
    assert summary.max_mean_share == pytest.approx(27 / (80 / 3))
    table = format_table([summary])
    assert table.splitlines()[0].split()[:3] == ["policy", "reqs", "TTFT"]
    assert "round-robin" in table.splitlines()[2]
    rows = orjson.loads(write_summary([summary], tmp_path).read_bytes())
    assert set(rows[0]) >= SUMMARY_KEYS
    assert rows[0]["requests"] == 80


def test_fit_profile_raises_max_model_len_for_long_traces() -> None:
    long = tenant_trace(5, seed=1)
    fitted, note = fit_profile(SMALL, long)
    assert (fitted, note) == (SMALL, "")
    longer = [*long[:4], long[4].__class__(1.0, 9000, 100, (), 64)]
    fitted, note = fit_profile(SMALL, longer)
    assert fitted.config.max_model_len == 9100 and "9,100" in note


def test_kvgate_sim_writes_the_table_summary_and_plots(tmp_path: Path) -> None:
    trace = tmp_path / "trace.jsonl"
    lines = [
        orjson.dumps(
            {
                "timestamp": 40 * i,
                "input_length": 600 + 37 * i,
                "output_length": 20,
                "hash_ids": [0, 1 + i % 3],
            }
        )
        for i in range(40)
    ]
    trace.write_bytes(b"\n".join(lines) + b"\n")
    out = io.StringIO()
    args = argparse.Namespace(
        trace=str(trace),
        format="auto",
        policies="round-robin,oracle",
        replicas=2,
        profile="demo",
        rate_scale=2.0,
        limit=30,
        config=None,
        out=str(tmp_path / "out"),
        slo_ttft=2.0,
        slo_itl=0.1,
        seed=0,
        kv_event_delay=0.005,
        gateway_overhead=0.0,
        gateway_overhead_token=0.0,
    )
    assert run_sim(args, out) == 0
    text = out.getvalue()
    assert "round-robin" in text and "oracle" in text and "goodput" in text
    rows = orjson.loads((tmp_path / "out" / "summary.json").read_bytes())
    assert [r["policy"] for r in rows] == ["round-robin", "oracle"]
    assert all(r["requests"] == 30 and not math.isnan(r["ttft_p50_s"]) for r in rows)
    assert (tmp_path / "out" / "ttft_cdf.png").stat().st_size > 1000
    assert (tmp_path / "out" / "timeline.png").stat().st_size > 1000
    args.format = "nonsense"
    with pytest.raises(ValueError, match="--format"):
        run_sim(args, out)
