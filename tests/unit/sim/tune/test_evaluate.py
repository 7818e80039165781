from __future__ import annotations

import math
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import orjson
import pytest

from kvgate.cli import main
from routing.config.profiles import BUILTIN_PROFILES
from routing.traces import TraceRequest
from routing.traces.recorded import encode_header, encode_request
from sim.replay.settings import SimSettings
from sim.replay.sweep.runners import LocalRunner
from sim.tune.candidates import Candidate
from sim.tune.evaluate import FleetShape, evaluate, perturbed, ran_most, span, window
from sim.workloads import family


def _trace(seconds: float = 40.0, rps: float = 6.0) -> list[TraceRequest]:
    cell = family.FamilyCell(tenants=6, prefix_tokens=1024, popularity="zipf", conversations=90)
    chats = family.chats(cell)
    arrivals = family.open_arrivals(chats, rps, 1.0, seed=1)
    kept = [(c, a) for c, a in zip(chats, arrivals, strict=True) if a[0] < seconds]
    trace = family.chat_trace([c for c, _ in kept], tuple(a for _, a in kept), 16)
    return [replace(r, ttft_s=0.05) for r in trace]


def test_window_takes_the_last_seconds_from_zero() -> None:
    trace = [TraceRequest(float(t), 10, 1, ()) for t in range(10)]
    picked = window(trace, 9.0, 3.0)
    assert [r.arrival_s for r in picked] == [0.0, 1.0, 2.0]
    assert window(trace, 100.0, 3.0) == []


def test_perturbed_keeps_seed_zero_and_moves_by_at_most_a_gap() -> None:
    trace = [TraceRequest(float(t), 10, 1, (t,)) for t in range(50)]
    assert perturbed(trace, 0) == trace
    moved = perturbed(trace, 3)
    assert moved == perturbed(trace, 3) != trace
    assert [r.arrival_s for r in moved] == sorted(r.arrival_s for r in moved)
    by_id = {r.hash_ids: r.arrival_s for r in moved}
    assert all(abs(by_id[r.hash_ids] - r.arrival_s) <= 1.0 for r in trace)


def test_evaluate_replays_every_candidate_per_seed_and_measures_fidelity() -> None:
    live = Candidate("round-robin", BUILTIN_PROFILES["round-robin"], "live")
    other = Candidate("prefix-aware", BUILTIN_PROFILES["prefix-aware"])
    shape = FleetShape.of(2, "demo", block_size=16, num_blocks=400)
    assert shape.describe() == "2 replicas of demo (400 blocks of 16 tokens)"
    trace = _trace(20.0)
    ev = evaluate(trace, [live, other], shape, SimSettings(), seeds=2, runner=LocalRunner(1))
    assert len(ev.ttft_mean_s) == 2 and all(len(m) == 2 for m in ev.ttft_mean_s)
    assert ev.requests == len(trace) and ev.observed_ttft_mean_s == pytest.approx(0.05)
    assert ev.fidelity == pytest.approx(ev.ttft_mean_s[0][0] / 0.05)
    assert ev.of("prefix-aware") == ev.ttft_mean_s[1] and ev.of("nope") is None
    # Caches shared by tenants: the default beats round-robin in every seed.
    assert all(p < r for p, r in zip(ev.ttft_mean_s[1], ev.ttft_mean_s[0], strict=True))
    with pytest.raises(ValueError, match="distinct"):
        evaluate(trace, [live, live], shape, SimSettings(), seeds=1, runner=LocalRunner(1))


def test_sim_tune_reports_each_window_and_the_totals(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "recorded.jsonl"
    lines = [encode_header(datetime.now(UTC), 16, 4.0), *map(encode_request, _trace())]
    path.write_bytes(b"".join(lines))
    config = tmp_path / "kvgate.yaml"
    config.write_text("routing: {policy: round-robin}\ntuning: {candidates: [prefix-aware]}\n")
    args = ["sim", "tune", "--trace", str(path), "--profile", "demo", "--replicas", "2"]
    args += ["--config", str(config), "--interval", "10", "--seeds", "2", "--search", "0"]
    args += ["--min-requests", "5", "--out", str(tmp_path / "out")]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "window 0 (to 10 s)" in out and "mean TTFT over" in out
    assert "replaying 10 s after a lead-in of 10 s" in out  # one window, by default
    report = orjson.loads((tmp_path / "out" / "tune.json").read_bytes())
    assert report["home"] == "round-robin" and report["mode"] == "apply"
    first = report["windows"][0]
    assert first["ran"] == "round-robin" and first["action"] == "switch"
    assert first["target"] == "prefix-aware" and first["proposal"]["confident"]
    assert report["switches"] == 1 and report["tuned_vs_default"] < 1.0
    assert all(w["ran"] == "prefix-aware" for w in report["windows"][1:])


def test_sim_tune_fits_the_engine_timing_to_observed_ttfts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "recorded.jsonl"
    lines = [encode_header(datetime.now(UTC), 16, 4.0), *map(encode_request, _trace(20.0))]
    path.write_bytes(b"".join(lines))
    config = tmp_path / "kvgate.yaml"
    config.write_text("tuning: {candidates: [round-robin], fit_min_requests: 5}\n")
    args = ["sim", "tune", "--trace", str(path), "--profile", "demo", "--replicas", "2"]
    args += ["--config", str(config), "--interval", "10", "--seeds", "1", "--search", "0"]
    args += ["--min-requests", "5", "--mode", "shadow", "--engine-timing", "fitted"]
    args += ["--lead-in", "0"]
    assert main([*args, "--out", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert "fidelity" in out and "engine timing fitted to" in out
    assert "after a lead-in of 0 s" in out


def test_a_span_is_the_window_after_its_lead_in() -> None:
    trace = [TraceRequest(float(t), 10, 1, ()) for t in range(10)]
    part = span(trace, 9.0, 3.0, 2.0)
    assert [r.arrival_s for r in part.requests] == [0.0, 1.0, 2.0, 3.0, 4.0]
    assert part.lead == 2 and part.measure_from_s == 2.0
    assert [r.arrival_s for r in part.measured] == [2.0, 3.0, 4.0]
    cold = span(trace, 9.0, 3.0, 0.0)
    assert cold.requests == window(trace, 9.0, 3.0) and cold.measure_from_s == 0.0
    assert span(trace, 100.0, 3.0, 50.0).requests == []  # nothing in the window itself
    with pytest.raises(ValueError, match="lead_in_s must be >= 0"):
        span(trace, 9.0, 3.0, -1.0)


def backlog_trace() -> list[TraceRequest]:
    """A burst for 10 s that the fleet cannot keep up with, then 10 s of calm."""
    burst = _trace(10.0, rps=200.0)
    calm = [replace(r, arrival_s=r.arrival_s + 10.0) for r in _trace(10.0, rps=3.0)]
    return sorted(burst + calm, key=lambda r: r.arrival_s)


def test_the_lead_in_is_replayed_but_only_the_window_is_measured() -> None:
    old = Candidate("round-robin", BUILTIN_PROFILES["round-robin"])
    new = Candidate("prefix-aware", BUILTIN_PROFILES["prefix-aware"], "live")
    shape = FleetShape.of(2, "demo", block_size=16, num_blocks=400)
    trace = [replace(r, ttft_s=9.0 if r.arrival_s <= 10.0 else 0.5) for r in backlog_trace()]
    runner = LocalRunner(1)
    warm = span(trace, 20.0, 10.0, 10.0, old)
    ev = evaluate(warm, [new, old], shape, SimSettings(), seeds=1, runner=runner)
    assert ev.requests == len(warm.measured) < ev.lead_in_requests == warm.lead
    assert ev.observed_ttft_mean_s == pytest.approx(0.5)  # the window's requests alone
    cold = evaluate(span(trace, 20.0, 10.0, 0.0), [new], shape, SimSettings(), seeds=1,
                    runner=runner)  # fmt: skip
    assert cold.requests == ev.requests and cold.lead_in_requests == 0
    # The window inherits the burst's queues: its requests wait far longer than on a cold start.
    assert ev.ttft_mean_s[0][0] > 5 * cold.ttft_mean_s[0][0]


def test_the_lead_in_runs_under_the_profile_that_ran_most_of_it() -> None:
    a = Candidate("round-robin", BUILTIN_PROFILES["round-robin"])
    b = Candidate("prefix-aware", BUILTIN_PROFILES["prefix-aware"])
    history = [(-math.inf, a), (100.0, b)]
    assert ran_most(history, 100.0, 15.0) is a  # the window starts at the switch
    assert ran_most(history, 107.0, 15.0) is a  # 8 s of a, 7 s of b
    assert ran_most(history, 108.0, 15.0) is b
    assert ran_most([(-math.inf, a)], 50.0, 15.0) is a
