from __future__ import annotations

import math
import random
from collections.abc import Mapping

import pytest

from routing import EndpointSnapshot
from scoring.filters.saturation import SaturationFilter
from tests.unit.scoring.helpers import context, endpoint, metered, registry, request


def _kept(flt: SaturationFilter, endpoints: list[EndpointSnapshot]) -> list[str]:
    out = list(flt.filter(request(), endpoints, context()))
    assert all(any(e is x for x in endpoints) for e in out)
    return [e.id for e in out]


def test_drops_endpoints_over_either_threshold_strictly() -> None:
    endpoints = [
        metered("ok", waiting=0, kv_usage=0.1),
        metered("queue-at", waiting=5, kv_usage=0.1),  # 5 is not over the default 5
        metered("queue-over", waiting=6, kv_usage=0.1),
        metered("kv-at", waiting=0, kv_usage=0.8),
        metered("kv-over", waiting=0, kv_usage=0.81),
    ]
    assert _kept(SaturationFilter("sat"), endpoints) == ["ok", "queue-at", "kv-at"]


def test_unknown_metrics_are_not_saturated() -> None:
    endpoints = [
        endpoint("stale"),  # metrics None
        metered("silent"),  # engine reports neither field
        metered("nan", kv_usage=math.nan),
        metered("hot", waiting=50),
    ]
    assert _kept(SaturationFilter("sat"), endpoints) == ["stale", "silent", "nan"]


def test_fails_open_when_every_endpoint_is_saturated() -> None:
    endpoints = [metered("a", waiting=9), metered("b", kv_usage=0.99)]
    assert _kept(SaturationFilter("sat"), endpoints) == ["a", "b"]
    assert _kept(SaturationFilter("sat"), [metered("x", waiting=100)]) == ["x"]


def test_empty_single_and_zeros() -> None:
    assert _kept(SaturationFilter("sat"), []) == []
    assert _kept(SaturationFilter("sat"), [metered("x", waiting=0, kv_usage=0.0)]) == ["x"]


def test_custom_thresholds_and_disabling_the_cache_check() -> None:
    flt = _make({"queue_threshold": 0, "kv_threshold": 1.0})
    endpoints = [metered("idle", waiting=0, kv_usage=1.0), metered("busy", waiting=1)]
    assert _kept(flt, endpoints) == ["idle"]


def test_registry_reads_and_validates_thresholds() -> None:
    flt = _make({})
    assert (flt.queue_threshold, flt.kv_threshold) == (5.0, 0.8)
    for params, bound in (
        ({"queue_threshold": -1}, ">= 0"),
        ({"queue_threshold": "5"}, ">= 0"),
        ({"kv_threshold": 1.5}, ">= 0 and <= 1"),
    ):
        with pytest.raises(
            ValueError, match=rf"'{next(iter(params))}' must be a finite number and {bound}"
        ):
            _make(params)
    with pytest.raises(ValueError, match=r"unknown parameter.*'staleness'"):
        _make({"staleness": 0.2})


def _make(params: Mapping[str, object]) -> SaturationFilter:
    flt = registry().make_filter("saturation-filter", "sat", params)
    assert isinstance(flt, SaturationFilter)
    return flt


def test_returns_its_input_when_it_removes_nobody() -> None:
    flt = SaturationFilter("sat")
    calm = [metered("a", waiting=1, kv_usage=0.2), endpoint("b")]
    assert flt.filter(request(), calm, context()) is calm
    hot = [metered("a", waiting=9), metered("b", kv_usage=0.9)]
    assert flt.filter(request(), hot, context()) is hot  # fails open


def test_keeps_what_saturated_says_on_random_pools() -> None:
    gen = random.Random(2)
    usages = [None, 0.1, 0.8, 0.81, 1.0, 1.7, -0.3, math.nan]
    for _ in range(300):
        flt = SaturationFilter(
            "sat", SaturationFilter.Params(gen.choice((0.0, 5.0)), gen.choice((0.5, 0.8, 1.0)))
        )
        endpoints = [
            endpoint(f"e{k}")
            if gen.random() < 0.15
            else metered(f"e{k}", waiting=gen.choice((None, 0, 5, 6)), kv_usage=gen.choice(usages))
            for k in range(gen.randint(0, 10))
        ]
        expected = [e.id for e in endpoints if not flt.saturated(e)] or [e.id for e in endpoints]
        assert _kept(flt, endpoints) == expected
