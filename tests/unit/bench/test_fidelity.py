"""The fidelity check's arithmetic, reports and offline half (no sockets, no processes)."""

from __future__ import annotations

import math
from dataclasses import replace
from datetime import UTC, datetime
from itertools import pairwise
from pathlib import Path

import orjson
import pytest

from bench.fidelity.__main__ import pd_fleet
from bench.fidelity.check import PolicyCheck, SimRun, check_policy, series
from bench.fidelity.compare import (
    Errors,
    RunMetrics,
    arrival_jitter,
    averaged,
    compare,
    relative_error,
)
from bench.fidelity.live import LiveRun
from bench.fidelity.probe import LONG_TOKENS, SMALL_TOKENS, Overheads, probe_requests
from bench.fidelity.report import format_report, write_json, write_plot
from bench.fidelity.workload import (
    MODEL,
    MOONCAKE_TRACE,
    FidelitySettings,
    build_case,
    build_trace,
    jittered,
    slowed,
    spread_bursts,
)
from routing.config.disaggregation import DisaggregationSection
from routing.traces import TraceRequest
from routing.traces.recorded import encode_header, encode_request
from sim.engine.profiles import get_profile
from sim.live.experiment import PdFleet
from sim.live.scrape import ReplicaReport
from sim.replay import SimSettings
from sim.traces import prompt_token_ids
from sim.workloads import timed_requests
from tests.unit.sim.replay.equivalence import mooncake_slice


def test_relative_error_is_the_distance_over_the_live_value() -> None:
    assert relative_error(1.1, 1.0) == pytest.approx(0.1)
    assert relative_error(0.8, 1.0) == pytest.approx(0.2)
    assert relative_error(-2.0, -1.0) == pytest.approx(1.0)
    for sim, live in ((1.0, 0.0), (math.nan, 1.0), (1.0, math.nan)):
        assert math.isnan(relative_error(sim, live))


def test_run_metrics_mean_p90_and_hit_rate() -> None:
    m = RunMetrics.of([float(x) for x in range(10, 0, -1)], hits=30, queries=120)
    assert (m.requests, m.ttft_mean_s, m.ttft_p90_s, m.hit_rate) == (10, 5.5, 9.0, 0.25)
    empty = RunMetrics.of([], hits=0, queries=0)
    assert empty.requests == 0
    assert math.isnan(empty.ttft_mean_s) and math.isnan(empty.ttft_p90_s)
    assert math.isnan(empty.hit_rate)


def test_compare_gives_relative_errors_and_hit_rate_points() -> None:
    live = RunMetrics(100, ttft_mean_s=0.200, ttft_p90_s=0.500, hit_rate=0.40)
    sim = RunMetrics(100, ttft_mean_s=0.150, ttft_p90_s=0.600, hit_rate=0.44)
    e = compare(live, sim)
    assert e.ttft_mean == pytest.approx(0.25)
    assert e.ttft_p90 == pytest.approx(0.20)
    assert e.hit_rate == pytest.approx(0.10)
    assert e.hit_rate_points == pytest.approx(4.0)
    assert e.worst == pytest.approx(0.25)
    assert compare(live, live) == Errors(0.0, 0.0, 0.0, 0.0)
    assert math.isnan(compare(replace(live, hit_rate=0.0), sim).worst)


def test_arrival_jitter_ignores_a_constant_shift() -> None:
    scheduled = [0.0, 1.0, 2.0, 3.0]
    shifted = [5.0, 6.0, 7.0, 8.0]
    j = arrival_jitter(scheduled, shifted)
    assert (j.mean_s, j.p99_s, j.max_s) == (0.0, 0.0, 0.0)
    late = arrival_jitter(scheduled, [5.0, 6.5, 7.0, 8.1])
    assert late.max_s == pytest.approx(0.5) and late.p99_s == pytest.approx(0.5)
    assert late.mean_s == pytest.approx(0.15)
    with pytest.raises(ValueError, match="3 observed arrivals for 4"):
        arrival_jitter(scheduled, shifted[:3])


def _trace() -> list[TraceRequest]:
    s = FidelitySettings(sessions=6, tenants=2, rate_per_s=4.0, think_s=1.0, output_tokens=8)
    return build_trace(s, block_tokens=16)


def test_the_live_requests_are_the_trace_as_token_id_completions() -> None:
    trace = _trace()
    requests = timed_requests(trace, MODEL, include_usage=True)
    assert [r.at_s for r in requests] == [r.arrival_s for r in trace]
    for req, tr in zip(requests, trace, strict=True):
        body = orjson.loads(req.body)
        assert req.path == "/v1/completions" and body["stream"] is True
        assert body["prompt"] == prompt_token_ids(tr) and len(body["prompt"]) == tr.input_tokens
        assert body["max_tokens"] == tr.output_tokens
        assert body["stream_options"] == {"include_usage": True}
        assert req.headers == {"x-session-id": tr.session}


def _recording(trace: list[TraceRequest], path: Path, delay_s: float) -> Path:
    """What the gateway would record for `trace`: its own ids, arrivals a little late."""
    with path.open("wb") as f:
        f.write(encode_header(datetime.now(UTC), 16, 4.0))
        for r in reversed(trace):  # completion order is not arrival order
            ids = tuple(h * 7919 + 3 for h in r.hash_ids[: r.input_tokens // 16])
            f.write(encode_request(replace(r, arrival_s=r.arrival_s + delay_s, hash_ids=ids)))
    return path


def _live(path: Path, ttfts: tuple[float, ...], hits: int, queries: int) -> LiveRun:
    counters = ReplicaReport(
        "all",
        requests=len(ttfts),
        prefix_queries=queries,
        prefix_hits=hits,
        ttft_sum_s=sum(ttfts) * 0.8,
        ttft_count=len(ttfts),
        itl_sum_s=0.6,
        itl_count=40,
    )
    return LiveRun("prefix-aware", ttfts, 0, counters, (len(ttfts),), 12.0, path, 1.5)


def _check(tmp_path: Path) -> PolicyCheck:
    trace = _trace()
    path = _recording(trace, tmp_path / "recorded.jsonl", delay_s=2.5)
    live = _live(path, tuple(0.1 + 0.01 * i for i in range(len(trace))), 500, 1000)
    return check_policy(live, trace, get_profile("demo"), SimSettings(replicas=2))


def test_the_recording_replays_like_the_trace_it_recorded(tmp_path: Path) -> None:
    check = _check(tmp_path)
    n = len(_trace())
    assert check.recorded_requests == n and check.recorded_tokens_match
    assert check.jitter.max_s == pytest.approx(0.0, abs=1e-5)
    # Same arrivals (shifted), same sharing of full blocks, same policy: same replay.
    assert check.sim.metrics.requests == check.recorded.metrics.requests == n
    assert check.recorded.metrics.hit_rate == pytest.approx(check.sim.metrics.hit_rate)
    # (recorded arrivals are rounded to the microsecond)
    assert check.recorded.ttfts_s == pytest.approx(check.sim.ttfts_s, abs=1e-5)
    assert 0 < check.sim.metrics.hit_rate < 1
    assert check.live_metrics.hit_rate == 0.5
    assert check.client_overhead_s == pytest.approx(0.2 * check.live_metrics.ttft_mean_s)
    assert check.sim_errors == compare(check.live_metrics, check.sim.metrics)
    assert check.step_stretch == pytest.approx(0.6 / 40 / check.sim.itl_mean_s)


def test_report_table_json_and_plot(tmp_path: Path) -> None:
    check = _check(tmp_path)
    text = format_report([check])
    rows = [line.split() for line in text.splitlines()[2:5]]
    assert [r[0] for r in rows] == ["chats/prefix-aware"] * 3
    assert [r[1:3] for r in rows] == [["live", str(check.live_metrics.requests)],
                                      ["sim:", "trace"], ["sim:", "recording"]]  # fmt: skip
    assert f"{check.sim_errors.ttft_mean:.1%}" in rows[1]
    assert "token counts equal the trace's" in text
    path = write_json({"replicas": 2}, [check], tmp_path / "out")
    doc = orjson.loads(path.read_bytes())
    entry = doc["policies"][0]
    assert doc["replicas"] == 2 and entry["policy"] == "prefix-aware"
    assert entry["sim_trace"]["errors_vs_live"]["ttft_mean_rel"] == pytest.approx(
        check.sim_errors.ttft_mean
    )
    assert entry["live"]["hit_rate"] == 0.5
    assert len(entry["ttfts_s"]["sim_recording"]) == check.recorded_requests
    png = write_plot([check], tmp_path / "out")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_json_writes_nan_as_null(tmp_path: Path) -> None:
    check = _check(tmp_path)
    empty = SimRun((), RunMetrics.of([], 0, 0), (0, 0), 0, math.nan)
    path = write_json({}, [replace(check, recorded=empty)], tmp_path)
    entry = orjson.loads(path.read_bytes())["policies"][0]
    assert entry["sim_recording"]["ttft_mean_s"] is None
    assert entry["sim_recording"]["errors_vs_live"]["ttft_mean_rel"] is None


def test_slowdown_stretches_arrivals_and_steps_alike() -> None:
    base = FidelitySettings(sessions=4, tenants=2, slowdown=1.0)
    trace, slow = build_trace(base, 16), build_trace(replace(base, slowdown=3.0), 16)
    assert [r.arrival_s * 3 for r in trace] == pytest.approx([r.arrival_s for r in slow])
    assert [r.hash_ids for r in trace] == [r.hash_ids for r in slow]
    demo = get_profile("demo")
    assert slowed(demo, 1.0) is demo
    three = slowed(demo, 3.0)
    assert three.config == demo.config
    assert three.timing.overhead_s == pytest.approx(3 * demo.timing.overhead_s)
    assert three.timing.prefill_token_s == pytest.approx(3 * demo.timing.prefill_token_s)
    assert three.timing.kv_read_token_s == pytest.approx(3 * demo.timing.kv_read_token_s)


def test_the_mooncake_case_fits_its_fleet(tmp_path: Path) -> None:
    original = mooncake_slice(tmp_path, 200)
    (tmp_path / "conversation_1500.jsonl").rename(tmp_path / MOONCAKE_TRACE)
    s = FidelitySettings(traces=tmp_path, mooncake_requests=200, mooncake_rate_scale=6.0)
    case = build_case(s, "mooncake")
    config = case.profile.config
    assert (config.num_blocks, config.max_model_len) == (16384, 32768)
    assert case.emulator_args == ("--num-gpu-blocks", "16384", "--max-model-len", "32768")
    h100 = get_profile("h100-llama3-8b").timing
    assert case.profile.timing.prefill_token_s == pytest.approx(3 * h100.prefill_token_s)
    kept = [r for r in original if r.input_tokens + 16 <= 32768]
    assert 0 < len(case.trace) == len(kept) < len(original)
    assert all(r.output_tokens <= 16 for r in case.trace)
    # 6x as fast as recorded, three times slower on both sides: half the recorded gaps;
    # the requests of a burst 10 ms apart, in trace order.
    assert [r.input_tokens for r in case.trace] == [r.input_tokens for r in kept]
    assert case.trace[-1].arrival_s == pytest.approx(0.5 * kept[-1].arrival_s, abs=0.5)
    assert all(b.arrival_s - a.arrival_s >= 0.01 - 1e-9 for a, b in pairwise(case.trace))
    with pytest.raises(ValueError, match="unknown case"):
        build_case(s, "nonsense")


def test_the_probe_splits_the_time_outside_the_engines() -> None:
    long_extra = 0.004 + 0.010 + 1e-6 * (LONG_TOKENS - SMALL_TOKENS)
    o = Overheads.of((0.104, 0.100), (0.214, 0.200), (0.5 + long_extra, 0.5))
    assert o.engine_overhead_s == pytest.approx(0.004)
    assert o.gateway_overhead_s == pytest.approx(0.010)
    assert o.gateway_overhead_token_s == pytest.approx(1e-6)
    assert Overheads.of((0.1, 0.2), (0.1, 0.2), (0.1, 0.2)).gateway_overhead_token_s == 0.0
    small = probe_requests(MODEL, SMALL_TOKENS, 16)
    assert len({r.hash_ids for r in small}) == len(small)  # no prefix shared
    assert all(r.input_tokens == SMALL_TOKENS for r in small)


def test_the_engines_error_leaves_out_the_modelled_outside_time(tmp_path: Path) -> None:
    check = _check(tmp_path)
    shifted = replace(check, modelled_outside_s=0.01)
    engines = check.sim.metrics.ttft_mean_s - 0.01
    assert shifted.engine_ttft_error == pytest.approx(
        relative_error(engines, check.live.engine_ttft_mean_s)
    )


def test_a_burst_is_spread_in_trace_order() -> None:
    burst = [TraceRequest(t, n, 1, ()) for t, n in ((0.0, 1), (0.0, 2), (0.0, 3), (1.0, 4))]
    spread = spread_bursts(burst, 0.01)
    assert [(r.arrival_s, r.input_tokens) for r in spread] == [
        (0.0, 1),
        (0.01, 2),
        (0.02, 3),
        (1.0, 4),
    ]


def test_runs_averaged_are_the_means_of_each_runs_figures() -> None:
    a = RunMetrics(10, ttft_mean_s=1.0, ttft_p90_s=2.0, hit_rate=0.1)
    b = RunMetrics(12, ttft_mean_s=2.0, ttft_p90_s=5.0, hit_rate=0.3)
    m = averaged([a, b])
    assert (m.requests, m.ttft_mean_s, m.ttft_p90_s) == (22, 1.5, 3.5)
    assert m.hit_rate == pytest.approx(0.2)
    assert averaged([a]) == a
    assert math.isnan(averaged([]).ttft_p90_s)


def test_jitter_is_seeded_bounded_and_keeps_a_burst_in_order() -> None:
    burst = [TraceRequest(t, n, 1, ()) for t, n in ((0.0, 1), (0.0, 2), (0.0, 3), (1.0, 4))]
    trace = spread_bursts(burst, 0.01)
    one, again, other = (
        jittered(trace, 0.005, 1),
        jittered(trace, 0.005, 1),
        jittered(trace, 0.005, 2),
    )
    assert one == again and one != other
    assert [r.input_tokens for r in one] == [1, 2, 3, 4]
    for r, j in zip(trace, one, strict=True):
        assert 0 <= j.arrival_s - r.arrival_s < 0.005
        assert replace(j, arrival_s=r.arrival_s) == r


def test_the_loaded_case_is_the_mooncake_slice_faster_with_jittered_repetitions(
    tmp_path: Path,
) -> None:
    mooncake_slice(tmp_path, 200)
    (tmp_path / "conversation_1500.jsonl").rename(tmp_path / MOONCAKE_TRACE)
    s = FidelitySettings(traces=tmp_path, mooncake_requests=200, loaded_repeats=2)
    light, loaded = build_case(s, "mooncake"), build_case(s, "loaded")
    assert (light.repeats, light.jitter_s, loaded.repeats, loaded.jitter_s) == (1, 0.0, 2, 0.005)
    assert light.repetition(1) is light.trace
    assert loaded.profile == light.profile and loaded.emulator_args == light.emulator_args
    assert [r.input_tokens for r in loaded.trace] == [r.input_tokens for r in light.trace]
    # 6x against 4.5x the recorded rate; bursts still 10 ms apart
    assert loaded.trace[-1].arrival_s == pytest.approx(light.trace[-1].arrival_s * 4.5 / 6, abs=0.5)
    assert all(b.arrival_s - a.arrival_s >= 0.01 - 1e-9 for a, b in pairwise(loaded.trace))
    first, second = loaded.repetition(0), loaded.repetition(1)
    assert first == jittered(loaded.trace, 0.005, 0) and first != second
    assert [r.input_tokens for r in first] == [r.input_tokens for r in loaded.trace]


def test_repetitions_are_judged_on_their_means(tmp_path: Path) -> None:
    check = _check(tmp_path)
    slower = replace(
        check,
        repetition=1,
        live=replace(check.live, ttfts_s=tuple(2 * t for t in check.live.ttfts_s)),
    )
    other = replace(check, case="mooncake")
    groups = series([check, slower, other])
    assert [(g.case, len(g.checks)) for g in groups] == [("chats", 2), ("mooncake", 1)]
    both = groups[0]
    live = averaged([check.live_metrics, slower.live_metrics])
    assert both.live_metrics == live
    assert both.sim_errors == compare(live, averaged([check.sim.metrics, slower.sim.metrics]))
    assert groups[1].recorded_errors == other.recorded_errors
    text = format_report([check, slower, other])
    labels = [" ".join(line.split()[1:4]) for line in text.splitlines()[2:11]]
    assert labels[:3] == [
        f"live #1 {check.live_metrics.requests}",
        "sim: trace #1",
        "sim: recording #1",
    ]
    assert labels[6:] == ["live, mean of", "sim: trace, mean", "sim: rec., mean"]
    assert f"{both.sim_errors.ttft_mean:.1%}" in text.splitlines()[9]
    assert "\nchats/prefix-aware #2: live " in text and "\nmooncake/prefix-aware: live " in text
    doc = orjson.loads(write_json({}, [check, slower, other], tmp_path / "out").read_bytes())
    assert [(s["case"], s["runs"]) for s in doc["series"]] == [("chats", 2), ("mooncake", 1)]
    assert doc["series"][0]["live"]["ttft_mean_s"] == pytest.approx(live.ttft_mean_s)
    assert doc["series"][0]["live"]["ttft_p90_s_range"] == [
        check.live_metrics.ttft_p90_s,
        slower.live_metrics.ttft_p90_s,
    ]
    assert [p["repetition"] for p in doc["policies"]] == [0, 1, 0]
    assert write_plot([check, slower, other], tmp_path / "out").exists()


def test_the_pd_case_is_the_mooncake_slice_on_a_pd_pool(tmp_path: Path) -> None:
    mooncake_slice(tmp_path, 200)
    (tmp_path / "conversation_1500.jsonl").rename(tmp_path / MOONCAKE_TRACE)
    s = FidelitySettings(traces=tmp_path, mooncake_requests=200, out_dir=tmp_path / "out")
    mooncake, pd = build_case(s, "mooncake"), build_case(s, "pd")
    assert (pd.prefill, pd.decode, mooncake.prefill) == (2, 2, 0)
    assert pd.trace == mooncake.trace and pd.profile == mooncake.profile
    s.out_dir.mkdir()
    fleet, settings = pd_fleet(s, pd, SimSettings(replicas=4, scrape_interval_s=0.05))
    assert fleet.roles == ("prefill", "prefill", "decode", "decode")
    assert isinstance(fleet.fleet, PdFleet) and fleet.fleet.speedup == pytest.approx(1 / 3)
    assert (settings.replicas, settings.prefill, settings.decode) == (0, 2, 2)
    assert settings.scrape_interval_s == 0.05
    assert settings.disaggregation == DisaggregationSection(mode="conditional")
    assert "disaggregation" in fleet.config_path.read_text()


def test_a_pd_check_reports_the_share_of_requests_split(tmp_path: Path) -> None:
    check = _check(tmp_path)
    assert check.split_shares() is None and "P/D" not in format_report([check])
    pd = replace(check, case="pd", prefill=1)
    live, sim, recorded = pd.split_shares() or (0, 0, 0)
    per_replica = check.live.requests_per_replica
    assert live == pytest.approx(per_replica[0] / check.live_metrics.requests)
    assert sim == pytest.approx(check.sim.requests_per_replica[0] / check.sim.metrics.requests)
    assert 0 < recorded < 1
    text = format_report([pd])
    assert f"P/D: requests split live {live:.1%}, sim: trace {sim:.1%}" in text
    assert "legs pooled: not compared" in text and "HTTP + gateway" not in text
    entry = orjson.loads(write_json({}, [pd], tmp_path / "out").read_bytes())["policies"][0]
    assert entry["pd_split_shares"] == pytest.approx([live, sim, recorded])
