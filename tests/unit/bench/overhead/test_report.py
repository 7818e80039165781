"""Latency added over direct, saturation ratios and the table."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from bench.overhead.report import summarise, table


def _run(rate: float, p50_ms: float, p99_ms: float, ok: bool = True) -> dict[str, object]:
    return {
        "rate": rate,
        "achieved_rps": rate if ok else rate / 2,
        "p50_s": p50_ms / 1e3,
        "p99_s": p99_ms / 1e3,
        "sustained": ok,
        "errors": 0,
        "late": 0,
    }


def test_summary_adds_overhead_over_direct_and_saturation_ratios() -> None:
    measured = [
        {"target": "direct", "version": "", "runs": [_run(500, 0.2, 1.0), _run(1000, 0.2, 1.5)]},
        {
            "target": "kvgate:rr",
            "version": "1",
            "runs": [_run(500, 0.7, 2.0), _run(1000, 9, 50, False)],
        },
        {"target": "peer", "version": "2", "runs": [_run(500, 0.4, 1.2), _run(1000, 0.5, 2.5)]},
    ]
    settings = SimpleNamespace(
        rates=(500, 1000),
        duration_s=1,
        warmup_s=1,
        connections=8,
        stream_fraction=0.5,
        replicas=2,
        out=Path("."),
    )
    report = summarise(measured, {}, settings, ["stub"])
    kv = report["targets"][1]
    assert abs(kv["runs"][0]["added_p99_s"] - 1.0e-3) < 1e-12
    assert kv["saturation_rps"] == 500
    assert report["saturation_ratio_kvgate_to_peer"] == {"kvgate:rr / peer": 0.5}
    assert "| kvgate:rr | 500 |" in table(report)
