from __future__ import annotations

import argparse
from datetime import UTC, datetime
from pathlib import Path

from bench.tune.__main__ import _agreement, _switches
from routing.config.profiles import BUILTIN_PROFILES
from routing.traces.recorded import encode_header
from sim.live.client import RequestResult
from sim.live.experiment import ExperimentResult, Router
from sim.workloads.open_loop import TimedRequest

START = datetime(2026, 1, 1, tzinfo=UTC)


def _result(ttfts: list[float]) -> ExperimentResult:
    rows = [RequestResult(f"req-{i}", t, t, 200, "b0") for i, t in enumerate(ttfts)]
    return ExperimentResult.of("x", rows, [], 1.0, Router("http://x", {}, ()))


def _recording(path: Path) -> None:
    """An empty recording that started at START: the run's clock is zero there."""
    path.write_bytes(encode_header(START, 16, 4.0))


def test_a_switch_is_measured_over_the_next_interval_and_over_all_it_ran(tmp_path: Path) -> None:
    _recording(tmp_path / "apply.jsonl")
    schedule = [TimedRequest(float(s), "/v1/chat/completions", b"{}") for s in range(40)]
    # The fixed default: 1 s everywhere. The tuned run: 2 s for the first 5 s after the
    # switch at 10 s (a backlog draining), then 0.5 s until the switch home at 30 s.
    fixed = _result([1.0] * 40)
    tuned = _result([1.0] * 10 + [2.0] * 5 + [0.5] * 15 + [1.0] * 10)
    t0 = START.timestamp()
    seen = {
        "switches": [
            {"at": t0 + 30.0, "kind": "switch", "from": "v", "to": "prefix-aware",
             "predicted_gain": 0.03},
            {"at": t0 + 10.0, "kind": "switch", "from": "prefix-aware", "to": "v",
             "predicted_gain": 0.2},
        ]
    }  # fmt: skip
    runs = {"fixed:prefix-aware": (fixed, {}), "apply": (tuned, seen)}
    args = argparse.Namespace(out=tmp_path, interval=5.0)
    out = _switches(tuned, seen, runs, schedule, args)
    first, home = out
    assert (first["at_s"], first["held_s"]) == (10.0, 20.0)
    assert first["measured_gain"] == -1.0  # 2 s against 1 s over [10, 15)
    assert first["measured_gain_held"] == 1 - (5 * 2.0 + 15 * 0.5) / 20  # 0.125, over [10, 30)
    assert first["compared_with"] == "fixed:prefix-aware"
    assert home["held_s"] == 10.0  # to the last send + 1 s
    # No fixed run of `v`, the profile home replaced: no gain to measure it by.
    assert home["measured_gain_held"] is None and home["compared_with"] is None
    assert _agreement(out, "measured_gain") == 0.0  # the first: +20% predicted, -100% measured
    assert _agreement(out, "measured_gain_held") == 1.0
    # With one: home ran at 1 s in the tuned run where `v` ran at 0.5 s.
    runs["fixed:v"] = (_result([0.5] * 40), {})
    out = _switches(tuned, seen, runs, schedule, args)
    assert out[1]["measured_gain_held"] == -1.0 and out[1]["compared_with"] == "fixed:v"
    assert _agreement(out, "measured_gain_held") == 0.5  # home: +3% predicted, -100% measured
    level = [{**out[1], "predicted_gain": 0.0}]  # home replayed level: no sign to agree with
    assert _agreement([out[0], *level], "measured_gain_held") == 1.0


def test_no_fixed_run_no_measured_gain(tmp_path: Path) -> None:
    _recording(tmp_path / "apply.jsonl")
    schedule = [TimedRequest(float(s), "/v1/chat/completions", b"{}") for s in range(4)]
    tuned = _result([1.0] * 4)
    seen = {"switches": [{"at": START.timestamp() + 1, "kind": "switch", "from": "prefix-aware",
                          "to": "v", "predicted_gain": 0.1}]}  # fmt: skip
    args = argparse.Namespace(out=tmp_path, interval=5.0)
    (sw,) = _switches(tuned, seen, {"apply": (tuned, seen)}, schedule, args)
    assert sw["measured_gain"] is None and sw["measured_gain_held"] is None
    assert _agreement([sw], "measured_gain_held") is None


def test_each_phase_is_compared_with_the_best_fixed_run_measured_live(tmp_path: Path) -> None:
    from bench.tune.__main__ import parse, report
    from bench.tune.fixed import PhaseSweep
    from sim.tune.candidates import Candidate

    args = parse(["--fixed", "prefix-aware~prefix-match=4,least-load", "--out", str(tmp_path)])
    assert args.fixed == ["prefix-aware~prefix-match=4", "least-load"]
    _recording(tmp_path / "apply.jsonl")
    schedule = [TimedRequest(float(s), "/v1/chat/completions", b"{}") for s in range(4)]
    spans = [("calm", 0.0, 2.0), ("busy", 2.0, 4.0)]
    runs = {
        "fixed:prefix-aware": (_result([1.0, 1.0, 2.0, 2.0]), {}),
        "fixed:least-load": (_result([0.5, 0.5, 3.0, 3.0]), {}),  # offline's best for busy
        "fixed:prefix-aware~prefix-match=4": (_result([1.0, 1.0, 1.0, 1.0]), {}),
        "apply": (_result([1.0, 1.0, 1.5, 1.5]), {}),
    }
    default = Candidate("prefix-aware", BUILTIN_PROFILES["prefix-aware"])
    load = Candidate("least-load", BUILTIN_PROFILES["least-load"])
    sweeps = [PhaseSweep("calm", ((default, 1.0),)), PhaseSweep("busy", ((load, 1.0),))]
    out = report(runs, sweeps, schedule, spans, args)
    assert out["switches"] == [] and out["sign_agreement"] is None  # a run without a switch
    calm, busy = out["phases"]
    assert (calm["best_live"], calm["apply_vs_best_live"]) == ("least-load", 2.0)
    assert (busy["best_fixed"], busy["apply_vs_best_fixed"]) == ("least-load", 0.5)
    assert (busy["best_live"], busy["apply_vs_best_live"]) == ("prefix-aware~prefix-match=4", 1.5)
