from __future__ import annotations

import random
from collections import Counter
from collections.abc import Mapping, Sequence

import pytest

from routing import (
    EndpointSnapshot,
    Profile,
    RoutingRequest,
    SchedulingContext,
    WeightedScorer,
)
from scoring.filters.load_imbalance import LoadImbalanceFilter, load
from scoring.pickers.max_score import MaxScorePicker
from tests.unit.scoring.helpers import context, endpoint, metered, registry, request


def _kept(flt: LoadImbalanceFilter, endpoints: list[EndpointSnapshot]) -> list[str]:
    out = list(flt.filter(request(), endpoints, context()))
    assert all(any(e is x for x in endpoints) for e in out)
    return [e.id for e in out]


def _loads(*loads: int) -> list[EndpointSnapshot]:
    return [endpoint(f"e{i}", x) for i, x in enumerate(loads)]


def test_load_adds_known_waiting_to_in_flight() -> None:
    assert load(endpoint("a", 3)) == 3
    assert load(metered("a", 3, waiting=4)) == 7
    assert load(metered("a", 3)) == 3  # waiting not reported


def test_drops_hot_spots_beyond_the_absolute_gap_from_an_idle_endpoint() -> None:
    flt = LoadImbalanceFilter("imb")
    assert _kept(flt, _loads(0, 60, 64, 65, 100)) == ["e0", "e1", "e2"]


def test_needs_both_the_absolute_and_the_relative_gap() -> None:
    flt = LoadImbalanceFilter("imb")
    # 280 - 200 > 64 but 280 <= 200 * 1.5: not a hot spot.
    assert _kept(flt, _loads(200, 280, 300)) == ["e0", "e1", "e2"]
    # 301 exceeds both 200 + 64 and 200 * 1.5.
    assert _kept(flt, _loads(200, 280, 301)) == ["e0", "e1"]


def test_keeps_everything_when_balanced() -> None:
    flt = LoadImbalanceFilter("imb")
    assert _kept(flt, _loads(10, 40, 70)) == ["e0", "e1", "e2"]
    assert _kept(flt, _loads(0, 0, 0)) == ["e0", "e1", "e2"]
    assert _kept(flt, _loads(500)) == ["e0"]
    assert _kept(flt, []) == []


def test_never_empty_even_with_zero_thresholds() -> None:
    flt = LoadImbalanceFilter("imb", LoadImbalanceFilter.Params(0.0, 1.0))
    assert _kept(flt, _loads(3, 3, 4, 9)) == ["e0", "e1"]


def test_engine_queue_counts_toward_load() -> None:
    flt = LoadImbalanceFilter("imb", LoadImbalanceFilter.Params(abs_threshold=10))
    endpoints = [
        metered("queued", 2, waiting=20),
        endpoint("stale", 5),
        metered("idle", 0, waiting=0),
    ]
    assert _kept(flt, endpoints) == ["stale", "idle"]


class _SharedPrefixScorer:
    """Every prompt's best cache match is on "hot" (a system prompt everyone shares)."""

    name = "prefix"

    def score(
        self,
        request: RoutingRequest,
        endpoints: Sequence[EndpointSnapshot],
        ctx: SchedulingContext,
    ) -> Mapping[str, float]:
        return {e.id: 1.0 if e.id == "hot" else 0.0 for e in endpoints}


@pytest.mark.parametrize("with_filter", [False, True])
def test_bounds_the_collapse_of_pure_prefix_routing(with_filter: bool) -> None:
    filters = (
        (LoadImbalanceFilter("imb", LoadImbalanceFilter.Params(abs_threshold=8)),)
        if with_filter
        else ()
    )
    profile = Profile(
        "prefix",
        picker=MaxScorePicker("max"),
        filters=filters,
        scorers=(WeightedScorer(_SharedPrefixScorer(), 1.0),),
    )
    in_flight: Counter[str] = Counter()
    ctx = context(seed=1)
    for _ in range(60):  # requests that never finish: load only grows
        endpoints = [endpoint(i, in_flight[i]) for i in ("hot", "b", "c")]
        target = profile.run(request(), endpoints, ctx).target
        assert target is not None
        in_flight[target] += 1
    if with_filter:
        assert max(in_flight.values()) - min(in_flight.values()) <= 9, in_flight
    else:
        assert in_flight == Counter({"hot": 60})


def test_registry_reads_and_validates_thresholds() -> None:
    def make(params: Mapping[str, object]) -> LoadImbalanceFilter:
        flt = registry().make_filter("load-imbalance-filter", "imb", params)
        assert isinstance(flt, LoadImbalanceFilter)
        return flt

    flt = make({})
    assert (flt.abs_threshold, flt.rel_threshold) == (64.0, 1.5)
    flt = make({"abs_threshold": 8, "rel_threshold": 1})
    assert (flt.abs_threshold, flt.rel_threshold) == (8.0, 1.0)
    for params, bound in (
        ({"abs_threshold": -1}, ">= 0"),
        ({"rel_threshold": 0.9}, ">= 1"),
        ({"rel_threshold": None}, ">= 1"),
    ):
        with pytest.raises(
            ValueError, match=rf"'{next(iter(params))}' must be a finite number and {bound}"
        ):
            make(params)
    with pytest.raises(ValueError, match=r"unknown parameter.*'cache_threshold'"):
        make({"cache_threshold": 0.3})


def test_returns_its_input_when_nobody_is_a_hot_spot() -> None:
    balanced = _loads(10, 40, 70)
    assert LoadImbalanceFilter("imb").filter(request(), balanced, context()) is balanced


def test_keeps_the_band_around_the_least_loaded_on_random_pools() -> None:
    gen = random.Random(4)
    for _ in range(300):
        flt = LoadImbalanceFilter(
            "imb", LoadImbalanceFilter.Params(gen.choice((0.0, 4.0, 16.0)), gen.choice((1.0, 1.5)))
        )
        endpoints = [
            endpoint(f"e{k}", gen.randint(0, 30))
            if gen.random() < 0.2
            else metered(f"e{k}", gen.randint(0, 30), waiting=gen.choice((None, 0, 3, 40)))
            for k in range(gen.randint(1, 10))
        ]
        low = min(load(e) for e in endpoints)
        band = max(low + flt.abs_threshold, low * flt.rel_threshold)
        expected = [e.id for e in endpoints if load(e) <= band]
        assert _kept(flt, endpoints) == expected
