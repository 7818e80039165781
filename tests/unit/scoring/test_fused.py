"""The default profile's compiled pass (`scoring.fused`) against the plugins it stands for:
the same decision (ranking, every column and total to the last bit, filtered endpoints,
draws from the RNG), and the plugins wherever the pass does not apply."""

from __future__ import annotations

import math
import random
import sys
import time
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from routing import EndpointSnapshot, EngineMetrics, RoutingRequest, SchedulingContext
from routing.config.profiles import PluginSpec, ProfileSpec, RoutingSection
from routing.scheduler import Profile
from routing.types import Decision
from scoring.stack import RoutingStack, build_routing_stack
from scoring.state.prefix_hash import hash_blocks, prefix_seed

pytest.importorskip("scoring.fused_native")

BLOCK_CHARS = 64


def _variant(
    abs_threshold: float, rel_threshold: float, weights: list[float], eviction: float,
    order: list[int], with_filter: bool,
) -> ProfileSpec:  # fmt: skip
    scorers = [
        PluginSpec(type="estimated-ttft-scorer", weight=weights[0],
                   params={"eviction_weight": eviction}),
        PluginSpec(type="prefix-match-scorer", weight=weights[1]),
        PluginSpec(type="in-flight-scorer", weight=weights[2]),
        PluginSpec(type="kv-utilization-scorer", weight=weights[3]),
        PluginSpec(type="cache-headroom-scorer", weight=weights[4]),
    ]  # fmt: skip
    flt = PluginSpec(
        type="load-imbalance-filter",
        params={"abs_threshold": abs_threshold, "rel_threshold": rel_threshold},
    )
    return ProfileSpec(
        filters=[flt] if with_filter else [],
        scorers=[scorers[k] for k in order],
        picker=PluginSpec(type="max-score-picker"),
    )


def _stack(profile: ProfileSpec | None = None) -> RoutingStack:
    profiles = {"variant": profile} if profile is not None else {}
    return build_routing_stack(RoutingSection(profiles=profiles), time.monotonic, random.Random(1))


def _both(profile: Profile, request: RoutingRequest, endpoints: list[EndpointSnapshot],
          seed: int) -> tuple[Decision | None, Decision, bool]:  # fmt: skip
    """The fast path's decision (None: it declined), the plugins', and whether the two RNGs
    ended in the same state."""
    assert profile.fast is not None
    fast_rng, ref_rng = random.Random(seed), random.Random(seed)
    fast = profile.fast(request, endpoints, SchedulingContext(lambda: 0.0, fast_rng))
    plugins = replace(profile, fast=None)
    ref = plugins.run(request, endpoints, SchedulingContext(lambda: 0.0, ref_rng))
    return fast, ref, fast_rng.random() == ref_rng.random()


def _same(fast: Decision, ref: Decision) -> None:
    assert fast.profile == ref.profile
    assert fast.ranked == ref.ranked
    assert list(fast.scores.ids) == list(ref.scores.ids)  # type: ignore[attr-defined]
    assert list(fast.scores.names) == list(ref.scores.names)  # type: ignore[attr-defined]
    hexes = [[float(x).hex() for x in c] for c in fast.scores.columns]  # type: ignore[attr-defined]
    assert hexes == [[float(x).hex() for x in c] for c in ref.scores.columns]  # type: ignore[attr-defined]
    assert [x.hex() for x in fast.scores.totals] == [x.hex() for x in ref.scores.totals]  # type: ignore[attr-defined]
    assert dict(fast.filtered_out) == dict(ref.filtered_out)
    assert fast.scores == ref.scores  # the rows, too


def test_the_built_in_profiles_it_applies_to() -> None:
    profiles = _stack().scheduler.profiles
    fused = {name for name, p in profiles.items() if p.fast is not None}
    assert fused == {"prefix-aware", "estimated-ttft", "least-in-flight"}
    # precise-prefix reads the precise index; power-of-two, session and least-load have a
    # picker or scorer the pass does not know.


def _fleet(rng: random.Random, n: int, odd: bool) -> list[EndpointSnapshot]:
    out = []
    for i in range(n):
        metrics: EngineMetrics | None = EngineMetrics(
            scraped_at=0.0,
            waiting=rng.choice([None, 0, 1, 3, 20, 2.0]),
            kv_usage=rng.choice([0.0, 1.0, rng.random(), rng.random()]),
        )
        if odd and rng.random() < 0.2:  # the KV scorer's rare branches: the plugins decide
            metrics = rng.choice([None, replace(metrics, kv_usage=None),
                                  replace(metrics, kv_usage=math.nan),
                                  replace(metrics, kv_usage=1.5)])  # fmt: skip
        out.append(EndpointSnapshot(
            f"r{i}", f"http://r{i}:8000", frozenset({"m"}), metrics=metrics,
            in_flight=rng.choice([0, 0, 1, 2, 5, 40]), remote_in_flight=rng.choice([0, 0, 3]),
            pending_prefill_tokens=rng.choice([0, 0, 100, 5000]),
            remote_pending_prefill_tokens=rng.choice([0, 700]),
        ))  # fmt: skip
    return out


def _prompt(rng: random.Random, tenants: list[bytes]) -> bytes:
    head = rng.choice(tenants)
    return head + rng.randbytes(rng.choice([0, 64, 3000]))


@settings(max_examples=120, deadline=None)
@given(
    n=st.integers(1, 24),
    seed=st.integers(0, 2**32),
    abs_threshold=st.sampled_from([0.0, 1.0, 4.0, 16.0, 64.0]),
    rel_threshold=st.sampled_from([1.0, 1.5, 3.0]),
    weights=st.lists(st.sampled_from([0.0, 1e-3, 0.5, 1.0, 2.0, 4.0]), min_size=5, max_size=5),
    eviction=st.sampled_from([0.0, 0.5, 1.0]),
    order=st.permutations(range(5)).flatmap(lambda p: st.integers(1, 5).map(lambda k: list(p[:k]))),
    with_filter=st.booleans(),
    odd=st.booleans(),
)
def test_the_same_decision_as_the_plugins(
    n: int, seed: int, abs_threshold: float, rel_threshold: float, weights: list[float],
    eviction: float, order: list[int], with_filter: bool, odd: bool,
) -> None:  # fmt: skip
    spec = _variant(abs_threshold, rel_threshold, weights, eviction, order, with_filter)
    stack = _stack(spec)
    profile = stack.scheduler.profiles["variant"]
    rng = random.Random(seed)
    fleet = _fleet(rng, n, odd)
    for e in fleet:  # small caches: replicas fill up and the eviction term counts
        stack.index.set_capacity(e.id, rng.choice([8, 40, 200, 10_000]))
        for _ in range(rng.choice([0, 3, 12])):
            work = rng.uniform(100, 9000)
            stack.ttft_model.observe(e.id, work, 0.02 + 2e-4 * work * rng.uniform(0.5, 2))
    tenants = [rng.randbytes(rng.choice([64, 900, 4000])) for _ in range(3)]
    answered = 0
    for step in range(8):
        data = _prompt(rng, tenants) if step % 4 else b""  # now and then, no hashes
        hashes = hash_blocks(data, prefix_seed("m"), BLOCK_CHARS) if data else ()
        request = RoutingRequest(
            model="m", prefix_hashes=hashes, prefix_block_chars=BLOCK_CHARS,
            token_estimate=len(data) // 4,
        )  # fmt: skip
        fast, ref, same_rng = _both(profile, request, fleet, seed + step)
        if fast is not None:
            answered += 1
            _same(fast, ref)
            assert same_rng
        target = ref.ranked[0]
        stack.index.match(hashes, (target,))
        stack.index.record(target, hashes)
        fleet = [replace(e, in_flight=e.in_flight + 1) if e.id == target else e for e in fleet]
    if not odd:
        assert answered == 8  # plain fleets are always the fast path's


def test_ties_draw_from_the_rng_as_the_plugins_do() -> None:
    profile = _stack().scheduler.profiles["prefix-aware"]
    fleet = [EndpointSnapshot(f"r{i}", "http://x", metrics=EngineMetrics(0.0, 0, kv_usage=0.5))
             for i in range(6)]  # fmt: skip
    for seed in range(20):
        fast, ref, same_rng = _both(profile, RoutingRequest(model="m"), fleet, seed)
        assert fast is not None
        _same(fast, ref)
        assert same_rng
    rankings = {profile.fast(RoutingRequest(model="m"), fleet,  # type: ignore[misc]
                             SchedulingContext(lambda: 0.0, random.Random(s))).ranked
                for s in range(20)}  # fmt: skip
    assert len(rankings) > 1  # every replica ties: the order is drawn


def test_the_filter_drops_hot_spots_as_the_plugin_does() -> None:
    profile = _stack().scheduler.profiles["prefix-aware"]  # abs_threshold 16
    fleet = [EndpointSnapshot(f"r{i}", "http://x", metrics=EngineMetrics(0.0, 0, kv_usage=0.2),
                              in_flight=load) for i, load in enumerate([0, 30, 2, 50])]  # fmt: skip
    fast, ref, _ = _both(profile, RoutingRequest(model="m"), fleet, 0)
    assert fast is not None
    _same(fast, ref)
    assert dict(fast.filtered_out) == {"r1": "load-imbalance-filter", "r3": "load-imbalance-filter"}
    assert set(fast.ranked) == {"r0", "r2"}


class _Snapshot(EndpointSnapshot):
    __slots__ = ()


@pytest.mark.parametrize(
    "odd",
    [
        lambda e: replace(e, metrics=None),  # unknown KV usage: the scorer fills it in
        lambda e: replace(e, metrics=replace(e.metrics, kv_usage=float("nan"))),
        lambda e: replace(e, in_flight=True),  # not a plain int
        lambda e: _Snapshot(**{f: getattr(e, f) for f in EndpointSnapshot.__slots__}),
    ],
)
def test_it_declines_where_a_plugin_takes_another_branch(odd: Any) -> None:
    profile = _stack().scheduler.profiles["prefix-aware"]
    fleet = [EndpointSnapshot(f"r{i}", "http://x", metrics=EngineMetrics(0.0, 0, kv_usage=0.3))
             for i in range(3)]  # fmt: skip
    fleet[1] = odd(fleet[1])
    fast, ref, _ = _both(profile, RoutingRequest(model="m"), fleet, 0)
    assert fast is None
    assert ref.ranked  # the plugins decide
    assert profile.run(RoutingRequest(model="m"), fleet, _ctx()).ranked == ref.ranked


def test_an_empty_pool_is_left_to_the_plugins() -> None:
    profile = _stack().scheduler.profiles["prefix-aware"]
    assert profile.fast is not None
    assert profile.fast(RoutingRequest(model="m"), [], _ctx()) is None
    assert profile.run(RoutingRequest(model="m"), [], _ctx()).ranked == ()


def _ctx() -> SchedulingContext:
    return SchedulingContext(lambda: 0.0, random.Random(0))


def test_a_column_reads_as_the_list_of_its_floats() -> None:
    import pickle
    from collections.abc import Sequence

    from scoring.fused import fused_native

    values = [0.25, 1.0, 0.0, 1 / 3]
    col = fused_native.column(values)
    assert isinstance(col, Sequence)
    assert len(col) == 4 and list(col) == values and col == values and col == tuple(values)
    assert [col[i] for i in range(-4, 4)] == values + values
    assert col[1:3] == values[1:3] and list(reversed(col)) == values[::-1]
    assert col.index(0.0) == 2 and col.count(1.0) == 1 and (1 / 3) in col
    with pytest.raises(IndexError):
        col[4]
    assert pickle.loads(pickle.dumps(col)) == values
    assert repr(col) == f"Column({values!r})"
    assert col != "0.25" and fused_native.column([]) == []


def test_answers_of_the_wrong_length_are_refused_not_read_past() -> None:
    profile = _stack().scheduler.profiles["prefix-aware"]
    fast: Any = profile.fast
    kernel = fast._kernel
    fleet = [EndpointSnapshot(f"r{i}", "http://x", metrics=EngineMetrics(0.0, 0, kv_usage=0.3))
             for i in range(3)]  # fmt: skip
    _, ids, _ = kernel.gather(fleet)
    lines = fast._model.lines(ids)
    with pytest.raises(ValueError, match="per kept candidate"):
        kernel.columns(ids, [0, 0], lines, [0.0] * 3, None, lambda d: (1.0, 0.0))
    with pytest.raises(ValueError, match="per kept candidate"):
        kernel.columns(ids[:2], [0, 0, 0], lines, [0.0] * 3, None, lambda d: (1.0, 0.0))
    got = kernel.columns(ids, [0, 0, 0], lines, [0.0] * 3, None, lambda d: (1.0, 0.0))
    assert got is not None and len(got[0]) == 5


def test_a_decision_already_on_the_kernel_leaves_the_next_to_the_plugins() -> None:
    # The kernel's buffers hold one decision at a time: another thread's waits for nobody.
    profile = _stack().scheduler.profiles["prefix-aware"]
    fast: Any = profile.fast
    fleet = [EndpointSnapshot(f"r{i}", "http://x", metrics=EngineMetrics(0.0, 0, kv_usage=0.3))
             for i in range(3)]  # fmt: skip
    assert fast(RoutingRequest(model="m"), fleet, _ctx()) is not None
    with fast._lock:
        assert fast(RoutingRequest(model="m"), fleet, _ctx()) is None
        assert profile.run(RoutingRequest(model="m"), fleet, _ctx()).ranked
    assert fast(RoutingRequest(model="m"), fleet, _ctx()) is not None


def test_threads_deciding_at_once_get_the_plugins_decisions() -> None:
    from concurrent.futures import ThreadPoolExecutor

    stack = _stack()
    profile = stack.scheduler.profiles["prefix-aware"]
    rng = random.Random(3)
    fleet = _fleet(rng, 16, odd=False)
    tenants = [rng.randbytes(2000) for _ in range(4)]
    requests = []
    for i in range(40):
        data = _prompt(rng, tenants)
        hashes = hash_blocks(data, prefix_seed("m"), BLOCK_CHARS)
        stack.index.record(fleet[i % 16].id, hashes)
        requests.append(RoutingRequest(model="m", prefix_hashes=hashes,
                                       prefix_block_chars=BLOCK_CHARS,
                                       token_estimate=len(data) // 4))  # fmt: skip
    plugins = replace(profile, fast=None)
    want = [plugins.run(r, fleet, _ctx()).ranked for r in requests]

    def decide(k: int) -> tuple[str, ...]:
        return profile.run(requests[k % 40], fleet, _ctx()).ranked

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads switch inside decisions, not only between them
    try:
        with ThreadPoolExecutor(4) as pool:
            got = list(pool.map(decide, range(800)))
    finally:
        sys.setswitchinterval(interval)
    assert got == [want[k % 40] for k in range(800)]
