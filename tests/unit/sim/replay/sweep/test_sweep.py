"""`kvgate sim sweep`: grid expansion, weight overrides, choice of the best run, outputs, CLI."""

from __future__ import annotations

import dataclasses
import io
import math
import random
from pathlib import Path

import orjson
import pytest
import yaml

from kvgate.cli import build_parser, main
from routing import PluginRegistry
from routing.config.profiles import RoutingSection, effective_profiles
from scoring.builtin import register_builtins
from scoring.stack import build_scheduler
from scoring.state.prefix_index import PrefixIndex
from scoring.state.ttft_model import OnlineTtftModel, TtftCoefficients
from scoring.stateful_plugins import register_stateful_plugins
from sim.replay import Replay, SimSettings, summarize
from sim.replay.report import PolicySummary
from sim.replay.sweep import run_sweep
from sim.replay.sweep.grid import (
    GridPoint,
    WeightAxis,
    expand_grid,
    parse_numbers,
    parse_weights,
    with_weights,
)
from sim.replay.sweep.rank import Constraint, Objective, SweepRun, default_tie_break, rank
from tests.support.sweep_traces import tenant_trace_file, untimed_runs
from tests.unit.sim.replay.synthetic import SMALL, tenant_trace

SECTION = RoutingSection()
# Every summary field but `pd`, which a run on a P/D pool alone has.
SUMMARY_FIELDS = {f.name for f in dataclasses.fields(PolicySummary)} - {"pd"}


def test_parse_weights_and_numbers() -> None:
    axes = parse_weights(" prefix-match-scorer=1,3,5 ; queue-depth-scorer=0,2,2;")
    assert axes == [
        WeightAxis("prefix-match-scorer", (1.0, 3.0, 5.0)),
        WeightAxis("queue-depth-scorer", (0.0, 2.0)),
    ]
    assert parse_weights("") == []
    assert parse_numbers("4, 8,4", "--replicas", integer=True) == [4.0, 8.0]
    assert parse_numbers("0.5,2", "--rate-scale") == [0.5, 2.0]
    for bad, match in [
        ("prefix-match-scorer", "SCORER=W1"),
        ("prefix-match-scorer=a", "not a number"),
        ("prefix-match-scorer=-1", ">= 0"),
        ("x=1;x=2", "twice"),
    ]:
        with pytest.raises(ValueError, match=match):
            parse_weights(bad)
    with pytest.raises(ValueError, match="integers"):
        parse_numbers("4.5", "--replicas", integer=True)
    with pytest.raises(ValueError, match="> 0"):
        parse_numbers("1,0", "--rate-scale")


def test_the_grid_multiplies_only_the_weights_a_policy_has() -> None:
    axes = parse_weights("prefix-match-scorer=1,3,5;in-flight-scorer=1,2")
    points, notes = expand_grid(
        SECTION, ["round-robin", "least-load", "prefix-aware"], axes, [2, 4], [1.0, 2.0]
    )
    by_policy = {p: [g for g in points if g.policy == p] for p in ("round-robin", "least-load")}
    assert len(by_policy["round-robin"]) == 4  # replicas × rate scales, no weights
    assert all(g.weights == () for g in by_policy["round-robin"])
    assert {g.weights for g in by_policy["least-load"]} == {
        (("in-flight-scorer", 1.0),),
        (("in-flight-scorer", 2.0),),
    }
    prefix = [g for g in points if g.policy == "prefix-aware"]
    assert len(prefix) == 3 * 2 * 2 * 2 and len(points) == 4 + 8 + 24
    assert len(set(points)) == len(points)
    assert (
        GridPoint("prefix-aware", (("prefix-match-scorer", 5.0), ("in-flight-scorer", 2.0)), 4, 2.0)
        in prefix
    )
    assert len(notes) == 2 and "round-robin" in notes[0] and "prefix-match-scorer" in notes[1]


def test_unknown_policies_and_scorers_are_rejected() -> None:
    with pytest.raises(ValueError, match="unknown policy 'nope'"):
        expand_grid(SECTION, ["nope"], [], [1], [1.0])
    with pytest.raises(ValueError, match="no swept policy has a scorer named 'prefix-match"):
        expand_grid(
            SECTION, ["round-robin", "least-load"], parse_weights("prefix-match=1"), [1], [1.0]
        )
    points, _ = expand_grid(SECTION, ["oracle:least-load"], [], [1], [1.0])
    assert points == [GridPoint("oracle:least-load", (), 1, 1.0)]


def _scheduler_weights(section: RoutingSection, profile: str) -> dict[str, float]:
    registry = PluginRegistry()
    register_builtins(registry)
    register_stateful_plugins(registry, PrefixIndex(), OnlineTtftModel(TtftCoefficients(0, 0)))
    scheduler = build_scheduler(section, registry, lambda: 0.0, random.Random(0))
    return {w.scorer.name: w.weight for w in scheduler.profiles[profile].scorers}


def test_weight_overrides_reach_the_scheduler() -> None:
    weights = (("prefix-match-scorer", 7.0), ("in-flight-scorer", 0.5))
    section = with_weights(SECTION, "prefix-aware", weights)
    built = _scheduler_weights(section, "prefix-aware")
    assert built["prefix-match-scorer"] == 7.0 and built["in-flight-scorer"] == 0.5
    assert built["kv-utilization-scorer"] == 1.0  # not overridden
    assert _scheduler_weights(SECTION, "prefix-aware")["prefix-match-scorer"] == 2.0
    assert _scheduler_weights(section, "least-load") == _scheduler_weights(SECTION, "least-load")
    # oracle runs the prefix-aware profile, so its overrides land there
    oracle = with_weights(SECTION, "oracle", (("prefix-match-scorer", 9.0),))
    assert _scheduler_weights(oracle, "prefix-aware")["prefix-match-scorer"] == 9.0
    assert with_weights(SECTION, "round-robin", ()) is SECTION


def test_weight_overrides_change_what_a_replay_does() -> None:
    trace = tenant_trace(200, seed=2, tenants=10)
    hit = {}
    for weight in (0.0, 10.0):
        # With the TTFT estimate (which also counts cached blocks) off, only prefix-match
        # weighs cache affinity.
        overrides = (("prefix-match-scorer", weight), ("estimated-ttft-scorer", 0.0))
        section = with_weights(SECTION, "prefix-aware", overrides)
        settings = SimSettings(replicas=4, seed=1, routing=section)
        hit[weight] = summarize(Replay(trace, "prefix-aware", SMALL, settings).run(), settings, 0)
    assert hit[10.0].hit_rate > hit[0.0].hit_rate + 0.05


def _run(
    i: int, policy: str = "prefix-aware", replicas: int = 4, rate: float = 1.0, **fields: float
) -> SweepRun:
    base = dict.fromkeys(SUMMARY_FIELDS - {"policy", "requests_per_replica"}, 0.0)
    summary = PolicySummary(**{**base, "policy": policy, "requests_per_replica": (), **fields})  # type: ignore[arg-type]
    return SweepRun(i, GridPoint(policy, (), replicas, rate), summary)


def test_objectives_constraints_and_tie_breaks_pick_the_right_run() -> None:
    runs = [
        _run(0, "round-robin", ttft_p90_s=1.0, goodput=0.80),
        _run(1, ttft_p90_s=1.5, goodput=0.95),
        _run(2, ttft_p90_s=1.2, goodput=0.93),
        _run(3, "oracle", ttft_p90_s=0.5, goodput=0.99),
        _run(4, ttft_p90_s=1.2001, goodput=0.97),  # ties run 2 to 3 digits, better goodput
        _run(5, replicas=2, ttft_p90_s=1.2, goodput=0.97),  # same as 4 on fewer replicas
    ]
    p90 = Objective.parse("min:ttft_p90_s")
    ranking = rank(runs, p90, default_tie_break(p90))
    assert [r.index for r in ranking.runs] == [3, 0, 5, 4, 2, 1]
    assert ranking.best is not None and ranking.best.index == 0  # oracle is only a ceiling
    ranking = rank(runs, p90, default_tie_break(p90), [Constraint.parse("goodput >= 0.9")])
    assert ranking.best is not None and ranking.best.index == 5 and 0 not in ranking.feasible
    assert rank(runs, p90, p90, [Constraint.parse("goodput>0.99")]).best is None
    smallest = rank(runs, Objective.parse("min:replicas"), p90, [Constraint.parse("goodput>=0.9")])
    assert smallest.best is not None and smallest.best.index == 5
    nan = _run(6, ttft_p90_s=math.nan)
    assert rank([nan, runs[1]], p90, p90).runs[-1] is nan
    assert default_tie_break(Objective.parse("max:goodput")) == p90


@pytest.mark.parametrize(
    ("text", "match"),
    [("fastest", "min:METRIC"), ("max:speed", "unknown metric 'speed'"), ("up:goodput", "min:")],
)
def test_bad_objectives_are_rejected(text: str, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        Objective.parse(text)


def test_bad_constraints_are_rejected() -> None:
    for text, match in [
        ("goodput=0.9", "METRIC>=X"),
        ("speed>=1", "unknown"),
        ("goodput>=x", "not a number"),
    ]:
        with pytest.raises(ValueError, match=match):
            Constraint.parse(text)


def _sweep_args(tmp_path: Path, *extra: str) -> list[str]:
    trace = tenant_trace_file(tmp_path / "trace.jsonl")
    return [
        "sim", "sweep", "--trace", str(trace), "--profile", "demo", "--out", str(tmp_path / "out"),
        "--policies", "round-robin,prefix-aware", "--replicas", "2,3", *extra,
    ]  # fmt: skip


def test_a_sweep_finds_the_prefix_aware_run_best_for_hit_rate(tmp_path: Path) -> None:
    args = build_parser().parse_args(
        _sweep_args(tmp_path, "--objective", "max:hit_rate", "--weights", "prefix-match-scorer=1,4")
    )
    out = io.StringIO()
    assert run_sweep(args, out) == 0
    text = out.getvalue()
    assert "run 6/6" in text and "ETA" in text and "rank ok" in text
    report = orjson.loads((tmp_path / "out" / "sweep.json").read_bytes())
    assert report["objective"] == "max:hit_rate" and report["tie_break"] == "max:goodput"
    assert report["grid"]["weights"] == {"prefix-match-scorer": [1.0, 4.0]}
    runs = report["runs"]
    assert len(runs) == 6 and [r["rank"] for r in runs] == list(range(1, 7))
    assert all(set(r) >= SUMMARY_FIELDS | {"weights", "replicas", "rate_scale"} for r in runs)
    assert sorted(r["hit_rate"] for r in runs)[::-1] == [r["hit_rate"] for r in runs]
    best = report["best"]
    assert best["policy"] == "prefix-aware" and best["rank"] == 1
    assert best["hit_rate"] > max(r["hit_rate"] for r in runs if r["policy"] == "round-robin")
    # the snippet is a valid routing section that runs the best weights
    routing = RoutingSection.model_validate(yaml.safe_load(best["routing_yaml"])["routing"])
    scorers = effective_profiles(routing)[routing.policy].scorers
    assert {s.type: s.weight for s in scorers}["prefix-match-scorer"] == best["weights"][
        "prefix-match-scorer"
    ]
    assert (tmp_path / "out" / "best_routing.yaml").read_text() == best["routing_yaml"]
    assert (tmp_path / "out" / "sweep.png").stat().st_size > 1000


def test_jobs_give_the_same_results(tmp_path: Path) -> None:
    results = []
    for jobs in ("1", "2"):
        (tmp_path / jobs).mkdir()
        args = build_parser().parse_args(_sweep_args(tmp_path / jobs, "--jobs", jobs))
        assert run_sweep(args, io.StringIO()) == 0
        results.append(untimed_runs(tmp_path / jobs / "out" / "sweep.json"))
    assert results[0] == results[1]


def test_no_qualifying_run_exits_1_with_best_null(tmp_path: Path) -> None:
    args = build_parser().parse_args(_sweep_args(tmp_path, "--constraint", "ttft_p90_s<0.0001"))
    out = io.StringIO()
    assert run_sweep(args, out) == 1
    assert "no run meets the constraints" in out.getvalue()
    assert orjson.loads((tmp_path / "out" / "sweep.json").read_bytes())["best"] is None
    assert not (tmp_path / "out" / "best_routing.yaml").exists()


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--policies", "round-robin,fastest"], "unknown policy 'fastest'"),
        (["--weights", "warp-scorer=1,2"], "no swept policy has a scorer named 'warp-scorer'"),
        (["--objective", "max:speed"], "--objective: unknown metric 'speed'"),
        (["--objective", "best"], "--objective: expected min:METRIC or max:METRIC"),
        (["--constraint", "goodput=1"], "--constraint: expected METRIC>=X"),
        (["--replicas", "2,x"], "--replicas: expected comma-separated integers"),
        (["--jobs", "0"], "--jobs must be >= 1"),
        (["--profile", "no-such-gpu"], "no-such-gpu"),
    ],
)
def test_cli_errors_exit_2_without_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], message: str
) -> None:
    assert main(_sweep_args(tmp_path, *extra)) == 2
    err = capsys.readouterr().err
    assert err.startswith("kvgate: ") and message in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()


def test_plain_kvgate_sim_still_parses_and_needs_a_trace(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = build_parser().parse_args(
        ["sim", "--trace", "t.jsonl", "--replicas", "3", "--limit", "5"]
    )
    assert (args.sim_mode, args.trace, args.replicas, args.limit) == (None, "t.jsonl", 3, 5)
    assert (args.out, args.policies, args.rate_scale) == ("out/sim", "", 1.0)
    assert main(["sim", "--replicas", "3"]) == 2
    assert "--trace is required" in capsys.readouterr().err
