"""`kvgate+tune:P` and its controls: the config is a valid shadow-mode tuning section, and
the rounds summary gives each one's latency over `kvgate:P` and its companion's CPU."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bench.overhead.rounds import combine, table
from bench.overhead.tuner import _BURN, BURN_S, INTERVAL_S, launch_tuned, write_config
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


def test_rounds_compare_the_controls_with_the_plain_gateway() -> None:
    reports = [
        {
            "targets": [
                _target("kvgate:p", 0.002, 0.010),
                _target("kvgate+burn:p", 0.002, 0.013, 4.9),
                _target("kvgate+record:p", 0.002, 0.0105),
            ]
        }
    ]
    combined = combine(reports)
    assert combined["burn_vs_none"]["kvgate+burn:p"][500.0]["p99_ms"] == pytest.approx([3.0])
    assert combined["record_vs_none"]["kvgate+record:p"][500.0]["p99_ms"] == pytest.approx([0.5])
    assert combined["tuner_vs_none"] == {}
    assert "tuner_cpu_s" not in combined["targets"]["kvgate+record:p"]
    text = table(combined, rates=(500.0,))
    assert "kvgate+burn:p − nothing beside at 500/s: p50 0.00" in text
    assert "kvgate+record:p − no recording at 500/s: p50 0.00" in text
    assert "kvgate+burn:p: the process beside it: CPU seconds per round: 4.9" in text


def test_the_burn_control_is_a_valid_program_and_unknown_companions_are_refused(
    tmp_path: Path,
) -> None:
    compile(_BURN.format(busy=BURN_S, rest=INTERVAL_S - BURN_S), "<burn>", "exec")
    with pytest.raises(ValueError, match="nothing known"), launch_tuned("p", [], tmp_path, "x"):
        pass
