"""The precise index in the replay: fed by the engines' KV-cache events, after a delay."""

from __future__ import annotations

import io
import random
from collections.abc import Sequence
from pathlib import Path

import orjson
import pytest

from kvgate.cli import build_parser
from routing.config.profiles import PluginSpec, ProfileSpec, RoutingSection
from routing.traces import TraceRequest
from routing.types import Decision, EndpointSnapshot, EngineMetrics, RoutingRequest
from sim.engine.kv_events import external_hash
from sim.replay import Replay, SimSettings
from sim.replay.cli import run_sim
from sim.replay.kv_feed import needs_precise
from tests.unit.sim.replay.synthetic import BLOCK_TOKENS, SMALL, tenant_trace


def _precise_replay(trace: list[TraceRequest], delay: float, **settings: object) -> Replay:
    base: dict[str, object] = {"replicas": 3, "seed": 5, "kv_events": True}
    options = {**base, "kv_event_delay_s": delay, **settings}
    return Replay(trace, "prefix-aware", SMALL, SimSettings(**options))  # type: ignore[arg-type]


def _engine_keys(replay: Replay, position: int) -> set[int]:
    return set(map(external_hash, replay.replicas[position].engine.kv_cache.cached_hashes()))


def _assert_index_is_engine_cache(replay: Replay) -> None:
    for position, replica in enumerate(replay.replicas):
        keys = _engine_keys(replay, position)
        assert replay.precise.blocks(replica.id) == len(keys)
        assert all(replay.precise.depth(replica.id, (k,)) == 1 for k in keys)


@pytest.mark.parametrize("delay", [0.0, 0.05, 3.0])
def test_after_a_replay_the_index_holds_exactly_the_engine_caches(delay: float) -> None:
    # 12 tenants of 8 × 64 tokens and their suffixes overflow 640-block engines: evictions.
    replay = _precise_replay(tenant_trace(250, seed=2, tenants=12, rate=20.0), delay)
    replay.run()
    _assert_index_is_engine_cache(replay)
    counters = [replay.precise.counters(r.id) for r in replay.replicas]
    assert all(c is not None and c.removed_blocks > 0 for c in counters)
    assert all(c is not None and c.orphaned_blocks == c.unknown_removals == 0 for c in counters)
    assert replay.kv_feed is not None and replay.kv_feed.batches > 0


def _spaced(trace: list[TraceRequest], gap_s: float) -> list[TraceRequest]:
    return [
        TraceRequest(i * gap_s, r.input_tokens, 8, r.hash_ids, r.block_tokens)
        for i, r in enumerate(trace)
    ]


class _Watch:
    """At each decision: the request, and per replica (index keys, engine keys, idle)."""

    def __init__(self) -> None:
        self.replay: Replay | None = None
        self.requests: list[RoutingRequest] = []
        self.views: list[list[tuple[int, int, bool]]] = []

    def decided(
        self,
        now: float,
        request: RoutingRequest,
        snapshots: Sequence[EndpointSnapshot],
        scraped: Sequence[EngineMetrics | None],
        decision: Decision,
    ) -> None:
        assert self.replay is not None
        self.requests.append(request)
        self.views.append(
            [
                (self.replay.precise.blocks(r.id), len(_engine_keys(self.replay, i)), not r.busy)
                for i, r in enumerate(self.replay.replicas)
            ]
        )

    def first_token(self, now: float, request_id: str) -> None:
        return None

    def finished(self, now: float, request_id: str) -> None:
        return None


def _watched(trace: list[TraceRequest], delay: float) -> _Watch:
    watch = _Watch()
    settings = SimSettings(replicas=3, seed=5, kv_events=True, kv_event_delay_s=delay)
    replay = Replay(trace, "prefix-aware", SMALL, settings, observer=watch)
    watch.replay = replay
    replay.run()
    return watch


def test_the_index_follows_the_engines_at_once_or_lags_by_the_delay() -> None:
    trace = _spaced(tenant_trace(30, seed=4), gap_s=2.0)  # each request done before the next
    prompt = _watched(trace, 0.0)
    assert all(idle for view in prompt.views for _, _, idle in view)
    assert all(held == cached for view in prompt.views for held, cached, _ in view)
    assert sum(cached for _, cached, _ in prompt.views[-1]) > 0
    late = _watched(trace, 1000.0)  # nothing arrives before the trace ends
    assert all(held == 0 for view in late.views for held, _, _ in view)
    # prefix-aware does not read the precise index: the same decisions, the same caches.
    assert [[c for _, c, _ in v] for v in late.views] == [
        [c for _, c, _ in v] for v in prompt.views
    ]


def test_requests_carry_their_engine_block_hashes_as_keys() -> None:
    trace = tenant_trace(20, seed=1)
    watch = _watched(trace, 0.005)
    bs = SMALL.config.block_size
    for request, source in zip(watch.requests, trace, strict=True):
        assert request.prompt_tokens == source.input_tokens
        ((size, keys),) = request.token_keys
        assert size == bs and len(keys) == source.input_tokens // bs
        per = BLOCK_TOKENS // bs
        assert keys[0] == external_hash(source.hash_ids[0] * per)


def test_dispatch_speculates_until_the_events_arrive() -> None:
    warm = tenant_trace(1, seed=3)[0]
    # The same prompt on an idle fleet, then again 1 ms after its dispatch: its events are
    # not in yet (delay 0.5 s), but the index already counts the first dispatch's blocks.
    trace = [
        TraceRequest(0.0, 64, 4, (999,), BLOCK_TOKENS),  # every replica tracked from here on
        TraceRequest(0.0, 64, 4, (998,), BLOCK_TOKENS),
        TraceRequest(0.0, 64, 4, (997,), BLOCK_TOKENS),
        TraceRequest(3.0, warm.input_tokens, 4, warm.hash_ids, BLOCK_TOKENS),
        TraceRequest(3.001, warm.input_tokens, 4, warm.hash_ids, BLOCK_TOKENS),
    ]
    depths: list[list[int]] = []

    class Depths(_Watch):
        def decided(self, now: float, request: RoutingRequest, *rest: object) -> None:  # type: ignore[override]
            assert self.replay is not None
            keys = request.token_keys[0][1]
            depths.append(
                [self.replay.precise.depth(r.id, keys, now) for r in self.replay.replicas]
            )

    watch = Depths()
    settings = SimSettings(replicas=3, seed=5, kv_events=True, kv_event_delay_s=0.5)
    replay = Replay(trace, "round-robin", SMALL, settings, observer=watch)
    watch.replay = replay
    replay.run()
    n = warm.input_tokens // SMALL.config.block_size
    assert depths[3] == [0, 0, 0]
    assert sorted(depths[4]) == [0, 0, n]


def test_no_event_collection_unless_a_profile_reads_the_precise_index() -> None:
    trace = tenant_trace(5, seed=1)
    replay = Replay(trace, "prefix-aware", SMALL, SimSettings(replicas=2))
    assert replay.kv_feed is None
    assert all(r.engine.kv_cache.events is None for r in replay.replicas)
    replay.run()
    assert all(not replay.precise.tracks(r.id) for r in replay.replicas)


def test_needs_precise_reads_the_profile() -> None:
    scorers = [PluginSpec(type="estimated-ttft-scorer", params={"cache_view": "precise"})]
    profile = ProfileSpec(scorers=scorers, picker=PluginSpec(type="max-score-picker"))
    section = RoutingSection(profiles={"mine": profile})
    assert needs_precise(section, "mine")
    assert not needs_precise(section, "prefix-aware")
    assert not needs_precise(section, "no-such-profile")


def test_a_negative_delay_is_refused() -> None:
    with pytest.raises(ValueError, match="kv_event_delay_s"):
        SimSettings(kv_event_delay_s=-1.0)


def _mooncake_trace(path: Path, n: int = 40, tenants: int = 6) -> Path:
    """Tenants sharing a 2-block prefix, a block of their own each, every 100 ms."""
    rng = random.Random(1)
    rows = []
    for i in range(n):
        tenant = rng.randrange(tenants)
        ids = [2 * tenant, 2 * tenant + 1, 2 * tenants + i]
        row = {"timestamp": 100 * i, "input_length": 1436, "output_length": 8, "hash_ids": ids}
        rows.append(orjson.dumps(row))
    path.write_bytes(b"\n".join(rows) + b"\n")
    return path


def test_kvgate_sim_runs_precise_prefix_deterministically(tmp_path: Path) -> None:
    trace = _mooncake_trace(tmp_path / "trace.jsonl")
    summaries = []
    for run in ("a", "b"):
        out = tmp_path / run
        argv = [
            "sim", "--trace", str(trace), "--profile", "demo", "--replicas", "3", "--seed", "4",
            "--policies", "precise-prefix,prefix-aware", "--kv-event-delay", "0.01",
            "--out", str(out),
        ]  # fmt: skip
        printed = io.StringIO()
        assert run_sim(build_parser().parse_args(argv), printed) == 0
        assert "precise-prefix" in printed.getvalue()
        rows = orjson.loads((out / "summary.json").read_bytes())
        for row in rows:
            del row["sim_seconds"], row["sim_cpu_seconds"]
        summaries.append(rows)
    assert summaries[0] == summaries[1]
    precise = summaries[0][0]
    assert precise["policy"] == "precise-prefix" and precise["requests"] == 40
    assert 0.0 < precise["hit_rate"] < 1.0
