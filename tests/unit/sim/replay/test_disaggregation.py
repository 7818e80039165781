"""P/D pools in the replay: the planner's modes, the protocols' transfers, the legs' accounting."""

from __future__ import annotations

import argparse
import io
import random
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path

import orjson
import pytest

from routing.config.disaggregation import DisaggregationSection
from routing.traces import TraceRequest
from scoring.pd.planner import LINK
from sim.engine.types import KVTransferLink
from sim.replay import Replay, ReplayResult, SimSettings
from sim.replay.cli import fleet_settings, run_sim
from sim.replay.disaggregation import PdSummary
from tests.unit.sim.replay.synthetic import BLOCK_TOKENS, SMALL, tenant_trace

SHORT_SHARE = 0.7


def mixed_trace(n: int, seed: int = 0, rate: float = 18.0) -> list[TraceRequest]:
    """Short prompts of 4 tenants (2 shared trace blocks and one of their own, long answers)
    and long prompts no other request shares (24-40 trace blocks, short answers)."""
    rng = random.Random(seed)
    t, next_id, out = 0.0, 1000, []
    for _ in range(n):
        t += rng.expovariate(rate)
        if rng.random() < SHORT_SHARE:
            tenant = rng.randrange(4)
            ids: tuple[int, ...] = (10 * tenant, 10 * tenant + 1, next_id)
            output = rng.randint(60, 160)
        else:
            ids = tuple(range(next_id, next_id + rng.randint(24, 40)))
            output = rng.randint(8, 32)
        next_id += len(ids)
        tokens = (len(ids) - 1) * BLOCK_TOKENS + rng.randint(1, BLOCK_TOKENS)
        out.append(TraceRequest(t, tokens, output, ids, BLOCK_TOKENS))
    return out


def _pd(
    trace: list[TraceRequest],
    mode: str = "conditional",
    protocol: str = "vllm",
    policy: str = "prefix-aware",
    **settings: object,
) -> ReplayResult:
    profile = settings.pop("profile", SMALL)
    full = replace(_settings(mode, protocol), **settings)  # type: ignore[arg-type]
    return Replay(trace, policy, profile, full).run()  # type: ignore[arg-type]


def _summary(r: ReplayResult) -> PdSummary:
    assert r.pd is not None
    return r.pd


def _mean(values: Iterable[float]) -> float:
    xs = list(values)
    return sum(xs) / len(xs)


def _fingerprint(r: ReplayResult) -> tuple[object, ...]:
    return (
        r.dispatched,
        r.requests,
        r.prefix_hits,
        r.prefix_queries,
        r.pd,
        tuple(r.log.ttft_s),
        tuple(r.log.e2e_s),
        tuple(r.log.replica),
    )


def test_the_modes_split_none_some_or_every_request() -> None:
    trace = mixed_trace(300)
    never, always, conditional = (_pd(trace, mode) for mode in ("never", "always", "conditional"))
    assert all(r.requests == 300 for r in (never, always, conditional))
    assert _summary(never).split == 0 and _summary(never).why == {"mode_never": 300}
    assert never.dispatched[:2] == (0, 0)  # the prefill replicas idle
    assert _summary(always).split_share == 1.0 and _summary(always).why == {"mode_always": 300}
    assert all(n > 0 for n in always.dispatched)
    share = _summary(conditional).split_share
    assert 0.0 < share < 1.0 - SHORT_SHARE / 2  # the cached short prompts stay on D
    assert set(_summary(conditional).why) <= {"cached", "faster", "slower"}
    assert _summary(conditional).why["cached"] > 0
    # Splits are long prompts D lacks: more blocks cross the link a transfer than with `always`.
    assert _summary(conditional).moved_blocks_mean > _summary(always).moved_blocks_mean


def test_conditional_is_not_worse_than_never_on_a_mixed_load() -> None:
    trace = mixed_trace(300)
    never, conditional = _pd(trace, "never"), _pd(trace, "conditional")
    assert _mean(conditional.log.ttft_s) <= _mean(never.log.ttft_s)
    assert _summary(conditional).busy["prefill"] > 0 == _summary(never).busy["prefill"]


def test_sglang_always_splits_onto_decode_replicas_without_a_prefix_cache() -> None:
    trace = mixed_trace(120, rate=6.0)
    r = _pd(trace, "conditional", "sglang")
    pd = _summary(r)
    assert pd.split_share == 1.0 and pd.why == {"cannot_prefill": 120}
    blocks = [-(-t.input_tokens // SMALL.config.block_size) for t in trace]
    assert pd.moved_blocks_mean == pytest.approx(_mean(blocks))  # every prompt block moves
    replay = Replay(trace, "prefix-aware", SMALL, _settings("conditional", "sglang"))
    replay.run()
    decoders = [x for x in replay.replicas if x.id.startswith("decode-")]
    assert all(not x.engine.config.enable_prefix_caching for x in decoders)
    assert all(x.engine.stats().prefix_hits == 0 for x in decoders)
    assert all(x.engine.stats().prompt_tokens_external > 0 for x in decoders)


def _settings(mode: str, protocol: str = "vllm", **changes: object) -> SimSettings:
    section = DisaggregationSection(mode=mode, protocol=protocol)  # type: ignore[arg-type]
    base = SimSettings(replicas=0, prefill=2, decode=2, seed=3, disaggregation=section)
    return replace(base, **changes)  # type: ignore[arg-type]


def test_vllm_decode_replicas_pull_only_what_they_lack_and_the_link_line_is_learnt() -> None:
    trace = tenant_trace(150, seed=2, rate=8.0)  # tenants' shared system prompts
    r = _pd(trace, "always")
    blocks = _mean(-(-t.input_tokens // SMALL.config.block_size) for t in trace)
    assert _summary(r).moved_blocks_mean < 0.6 * blocks  # D holds the system prompts
    link = _summary(r).link_token_s, _summary(r).link_overhead_s
    initial = DisaggregationSection()
    assert link != (initial.transfer_token_s, initial.transfer_latency_s)
    fixed = _pd(trace, "always", disaggregation=DisaggregationSection(mode="always", learn=False))
    assert (_summary(fixed).link_token_s, _summary(fixed).link_overhead_s) == (
        initial.transfer_token_s,
        initial.transfer_latency_s,
    )


@pytest.mark.parametrize("protocol", ["vllm", "sglang"])
def test_every_leg_is_settled_and_every_held_block_released(protocol: str) -> None:
    trace = mixed_trace(200, seed=5)
    replay = Replay(trace, "prefix-aware", SMALL, _settings("always", protocol))
    assert replay.run().requests == 200
    assert all(x.in_flight == 0 and x.pending_prefill_tokens == 0 for x in replay.replicas)
    assert all(x.engine.stats().held_blocks == 0 for x in replay.replicas)
    assert not any(x.engine.has_work() for x in replay.replicas)
    planner = replay.gateways[0].planner
    assert planner is not None and planner.link.coefficients(LINK) is not None


@pytest.mark.parametrize("protocol", ["vllm", "sglang"])
def test_pd_replays_are_deterministic_and_fast_forward_changes_nothing(protocol: str) -> None:
    trace = mixed_trace(200, seed=7)
    runs = [
        _pd(trace, "conditional", protocol, fast_forward=fast, native=native)
        for fast, native in ((True, None), (True, None), (True, False), (False, None))
    ]
    first, *same, stepped = runs
    assert all(_fingerprint(r) == _fingerprint(first) for r in same)
    assert stepped.segments > 2 * first.segments and stepped.steps == first.steps
    assert (stepped.dispatched, stepped.prefix_hits) == (first.dispatched, first.prefix_hits)
    assert _summary(stepped).why == _summary(first).why
    assert list(stepped.log.ttft_s) == pytest.approx(list(first.log.ttft_s), abs=1e-9)
    assert list(stepped.log.e2e_s) == pytest.approx(list(first.log.e2e_s), abs=1e-9)


def test_replicas_of_role_both_prefill_for_others_while_they_decode_their_own() -> None:
    trace = mixed_trace(200, seed=8)
    runs = [_pd(trace, "always", replicas=2, decode=1, fast_forward=f) for f in (True, False)]
    for r in runs:
        assert r.requests == 200 and r.replica_ids[:2] == ("replica-00", "replica-01")
        assert all(n > 0 for n in r.dispatched)
    fast, stepped = runs
    assert fast.dispatched == stepped.dispatched
    assert list(fast.log.ttft_s) == pytest.approx(list(stepped.log.ttft_s), abs=1e-9)


def test_held_blocks_stall_a_prefill_replica_until_the_transfer_frees_them() -> None:
    # 80 blocks of 16 tokens on each replica, a 20 MB/s link: a long prompt's 2 MiB blocks
    # take ~0.1 s each to cross, so P's cache fills with held blocks and its queue waits.
    small = replace(SMALL, config=replace(SMALL.config, num_blocks=200))
    slow = replace(small, transfer=KVTransferLink(bandwidth_bytes_s=2e8))
    trace = [r for r in mixed_trace(120, seed=9, rate=30.0) if r.input_tokens < 2400]
    fast_link = _pd(trace, "always", profile=small)
    slow_link = _pd(trace, "always", profile=slow)
    assert slow_link.requests == fast_link.requests == len(trace)
    assert _summary(slow_link).transfer_mean_s > 20 * _summary(fast_link).transfer_mean_s
    assert _mean(slow_link.log.ttft_s) > _mean(fast_link.log.ttft_s)


def test_several_gateways_plan_pd_pairs_and_share_their_legs() -> None:
    trace = mixed_trace(200, seed=4)
    replay = Replay(trace, "prefix-aware", SMALL, _settings("always", "sglang", gateways=3))
    r = replay.run()
    assert r.requests == 200 and _summary(r).split == 200
    views = [v for g in replay.gateways for v in g.views]
    assert all(v.in_flight == 0 and v.pending_prefill_tokens == 0 for v in views)
    assert all(g.planner is not None for g in replay.gateways)


def test_a_pool_of_whole_replicas_replays_as_before_whatever_the_pd_section() -> None:
    trace = tenant_trace(200, seed=3)
    base = SimSettings(replicas=4, seed=7)
    pd_section = replace(base, disaggregation=DisaggregationSection(mode="always"))
    a = Replay(trace, "prefix-aware", SMALL, base).run()
    b = Replay(trace, "prefix-aware", SMALL, pd_section).run()
    assert a.pd is None and b.pd is None
    assert _fingerprint(a) == _fingerprint(b)
    assert a.replica_ids == ("replica-00", "replica-01", "replica-02", "replica-03")


def test_a_mixed_pool_names_its_replicas_by_role() -> None:
    replay = Replay([], "round-robin", SMALL, _settings("always", replicas=1))
    ids = [x.id for x in replay.replicas]
    assert ids == ["replica-00", "prefill-00", "prefill-01", "decode-00", "decode-01"]
    roles = [s.role for s in (replay.gateways[0].snapshot(i, None, frozenset()) for i in range(5))]
    assert roles == ["both", "prefill", "prefill", "decode", "decode"]


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"prefill": 2, "decode": 0}, "prefill replicas need a replica that decodes"),
        ({"prefill": 0, "decode": 2}, "decode replicas need prefill replicas"),
        ({"prefill": -1}, "replicas must be >= 1"),
    ],
)
def test_pd_fleets_are_checked(changes: dict[str, int], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        SimSettings(**{"replicas": 0, **changes})  # type: ignore[arg-type]


def _args(**changes: object) -> argparse.Namespace:
    base: dict[str, object] = {
        "replicas": None,
        "prefill": 0,
        "decode": 0,
        "pd_protocol": None,
        "pd_mode": None,
        "transfer_bandwidth": None,
        "transfer_latency": None,
    }
    return argparse.Namespace(**{**base, **changes})


def test_the_command_lines_fleet() -> None:
    assert fleet_settings(_args(), {})["replicas"] == 8
    pd = fleet_settings(_args(prefill=2, decode=3, pd_mode="always"), {})
    assert (pd["replicas"], pd["prefill"], pd["decode"]) == (0, 2, 3)
    assert pd["disaggregation"] == DisaggregationSection(mode="always")
    mixed = fleet_settings(_args(replicas=2, prefill=1), {})
    assert (mixed["replicas"], mixed["prefill"], mixed["decode"]) == (2, 1, 0)
    config = {"disaggregation": DisaggregationSection(protocol="sglang", min_uncached_tokens=9)}
    merged = fleet_settings(_args(prefill=1, decode=1, pd_mode="never"), config)
    assert merged["disaggregation"] == DisaggregationSection(
        protocol="sglang", mode="never", min_uncached_tokens=9
    )
    for changes, message in (
        ({"decode": 2}, "--decode needs --prefill"),
        ({"prefill": 2, "replicas": 0}, "--prefill needs replicas that decode"),
        ({"pd_mode": "always"}, "are for --prefill replicas"),
        ({"transfer_latency": 0.1}, "are for --prefill replicas"),
        ({"replicas": 0}, "--replicas must be >= 1"),
    ):
        with pytest.raises(ValueError, match=message):
            fleet_settings(_args(**changes), {})


def test_kvgate_sim_reports_a_pd_pool(tmp_path: Path) -> None:
    trace = tmp_path / "trace.jsonl"
    lines = [
        orjson.dumps(
            {
                "timestamp": 25 * i,
                "input_length": 600 + 97 * i,
                "output_length": 20,
                "hash_ids": [0, *range(1 + 20 * i, 3 + 20 * i + i % 5)],
            }
        )
        for i in range(40)
    ]
    trace.write_bytes(b"\n".join(lines) + b"\n")
    args = argparse.Namespace(
        trace=str(trace),
        format="auto",
        policies="prefix-aware",
        profile="demo",
        rate_scale=1.0,
        limit=None,
        config=None,
        slo_ttft=2.0,
        slo_itl=0.1,
        seed=0,
        kv_event_delay=0.005,
        gateway_overhead=0.0,
        gateway_overhead_token=0.0,
    )
    for name, fleet in (
        ("pd", _args(prefill=1, decode=1, pd_protocol="sglang", transfer_bandwidth=1e9)),
        ("whole", _args(replicas=2)),
    ):
        out = io.StringIO()
        run = argparse.Namespace(**vars(args), **vars(fleet), out=str(tmp_path / name))
        assert run_sim(run, out) == 0
        text = out.getvalue()
        [row] = orjson.loads((tmp_path / name / "summary.json").read_bytes())
        if name == "whole":
            assert "pd" not in row and "P/D" not in text and "2 replicas of demo" in text
            continue
        assert "1 prefill + 1 decode replicas (P/D sglang, conditional; KV link 1 GB/s" in text
        assert "note: the P/D KV link moves 1 GB/s" in text
        assert "prefix-aware: split 40/40 (100.0%; cannot_prefill 40)" in text
        pd = row["pd"]
        assert pd["split"] == 40 and pd["why"] == {"cannot_prefill": 40}
        assert pd["replicas"] == {"prefill": 1, "decode": 1}
        assert pd["transfer_mean_s"] > 0 and 0 < pd["busy"]["prefill"] < 1
