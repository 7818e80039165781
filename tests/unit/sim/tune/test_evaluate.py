from __future__ import annotations

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
from sim.tune.evaluate import FleetShape, evaluate, perturbed, window
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
    assert main([*args, "--out", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert "fidelity" in out and "engine timing fitted to" in out
