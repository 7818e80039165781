"""`kvgate+tune:P`: its config is a valid shadow-mode tuning section, and the rounds summary
gives its latency over `kvgate:P` and the tuner's CPU per round."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bench.overhead.rounds import combine, table
from bench.overhead.tuner import write_config
from routing.config.schema import load_config


def test_the_tuned_targets_config_is_shadow_mode(tmp_path: Path) -> None:
    config = load_config(write_config(tmp_path / "t.yaml"))
    assert config.tuning.mode == "shadow" and config.tuning.interval_s == config.tuning.window_s


def _target(name: str, p50: float, p99: float, tuner: float | None = None) -> dict[str, Any]:
    run = {"rate": 500.0, "achieved_rps": 500.0, "p50_s": p50, "p99_s": p99, "sustained": True}
    t: dict[str, Any] = {"target": name, "version": "", "saturation_rps": 500.0, "runs": [run]}
    if tuner is not None:
        t["tuner_cpu_s"] = tuner
    return t


def test_rounds_compare_the_tuned_gateway_with_the_plain_one() -> None:
    reports = [
        {
            "targets": [
                _target("kvgate:p", 0.002, 0.010),
                _target("kvgate+tune:p", 0.003, 0.014, 9.5),
            ]
        },
        {
            "targets": [
                _target("kvgate+tune:p", 0.002, 0.011, 8.0),
                _target("kvgate:p", 0.002, 0.012),
            ]
        },
    ]
    combined = combine(reports)
    diff = combined["tuner_vs_none"]["kvgate+tune:p"][500.0]
    assert diff["p99_ms"] == pytest.approx([4.0, -1.0])
    assert diff["p50_ms"] == pytest.approx([1.0, 0.0])
    assert combined["targets"]["kvgate+tune:p"]["tuner_cpu_s"] == [9.5, 8.0]
    assert "tuner_cpu_s" not in combined["targets"]["kvgate:p"]
    text = table(combined, rates=(500.0,))
    assert "kvgate+tune:p − no tuner at 500/s: p50 0.50 (0.00–1.00) ms" in text
    assert "kvgate+tune:p: the tuner's CPU seconds per round: 9.5, 8.0" in text
