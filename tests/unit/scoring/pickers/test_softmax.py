from __future__ import annotations

import math
from collections import Counter

import pytest

from scoring.pickers.softmax import SoftmaxPicker
from tests.unit.scoring.helpers import context, registry, request, scored


def _targets(
    n: int, totals: dict[str, float], temperature: float = 0.1, seed: int = 5
) -> Counter[str]:
    picker = SoftmaxPicker("soft", SoftmaxPicker.Params(temperature))
    ctx = context(seed=seed)
    return Counter(picker.pick(request(), scored(totals), ctx)[0] for _ in range(n))


def _within(count: int, n: int, p: float) -> bool:
    """Count within 5 standard deviations of the binomial mean n·p."""
    return abs(count - n * p) <= 5 * math.sqrt(n * p * (1 - p))


def test_target_frequencies_follow_the_softmax_of_scaled_totals() -> None:
    n = 10_000
    # Scaled totals 1, 0.5, 0; at temperature 0.5 the weights are 1, e^-1, e^-2.
    counts = _targets(n, {"a": 4.0, "b": 2.5, "c": 1.0}, temperature=0.5)
    weights = {"a": 1.0, "b": math.exp(-1), "c": math.exp(-2)}
    norm = sum(weights.values())
    for i, w in weights.items():
        assert _within(counts[i], n, w / norm), counts


def test_low_temperature_is_max_score_and_high_is_uniform() -> None:
    totals = {"a": 1.0, "b": 0.99, "c": 0.0}
    assert _targets(500, totals, temperature=1e-4) == Counter({"a": 500})
    n = 6000
    counts = _targets(n, totals, temperature=1e6)
    assert all(_within(counts[i], n, 1 / 3) for i in "abc"), counts


def test_default_temperature_strongly_prefers_the_best() -> None:
    assert SoftmaxPicker.Params().temperature == 0.1
    counts = _targets(2000, {"best": 0.9, "worst": 0.2})
    # P(best) = 1 / (1 + e^-10) ≈ 0.99995
    assert counts["best"] >= 1995, counts


def test_scaling_makes_the_draw_independent_of_the_totals_scale() -> None:
    small = SoftmaxPicker("s", SoftmaxPicker.Params(0.3)).pick(
        request(), scored({"a": 0.0, "b": 0.5, "c": 1.0}), context(3)
    )
    large = SoftmaxPicker("s", SoftmaxPicker.Params(0.3)).pick(
        request(), scored({"a": 7.0, "b": 12.0, "c": 17.0}), context(3)
    )
    assert list(small) == list(large)


def test_weights_are_stable_for_extreme_temperatures() -> None:
    tiny = SoftmaxPicker("s", SoftmaxPicker.Params(1e-300)).weights([0.0, 0.5, 1.0])
    assert tiny == [0.0, 0.0, 1.0]
    huge = SoftmaxPicker("s", SoftmaxPicker.Params(1e300)).weights([0.0, 1e300, 1.0])
    assert huge == pytest.approx([1.0, 1.0, 1.0])


def test_ties_and_nan() -> None:
    picker = SoftmaxPicker("s")
    assert picker.weights([0.4, 0.4, 0.4 + 1e-12]) == [1.0, 1.0, 1.0]
    assert picker.weights([math.nan, 0.0, 1.0]) == [0.0, pytest.approx(math.exp(-10)), 1.0]
    assert picker.weights([math.nan, math.nan]) == [0.0, 0.0]
    counts = _targets(500, {"nan": math.nan, "ok": 0.1})
    assert counts == Counter({"ok": 500})


def test_all_equal_is_uniform() -> None:
    n = 6000
    counts = _targets(n, {"a": 0.0, "b": 0.0, "c": 0.0})
    assert all(_within(counts[i], n, 1 / 3) for i in "abc"), counts


def test_fallbacks_are_the_rest_by_total_descending() -> None:
    totals = {"a": 0.9, "b": 0.6, "c": 0.3, "d": 0.1}
    picker = SoftmaxPicker("s", SoftmaxPicker.Params(1.0))
    ctx = context(seed=8)
    for _ in range(200):
        ranked = list(picker.pick(request(), scored(totals), ctx))
        assert sorted(ranked) == sorted(totals)
        assert ranked[1:] == sorted(ranked[1:], key=lambda i: -totals[i])


def test_single_candidate_and_empty() -> None:
    assert list(SoftmaxPicker("s").pick(request(), scored({"x": 0.3}), context())) == ["x"]
    assert list(SoftmaxPicker("s").pick(request(), [], context())) == []


def test_same_seed_same_ranking_independent_of_input_order() -> None:
    candidates = scored({f"e{i}": i / 10 for i in range(7)})
    first = SoftmaxPicker("s", SoftmaxPicker.Params(0.5)).pick(
        request(), candidates, context(seed=9)
    )
    second = SoftmaxPicker("s", SoftmaxPicker.Params(0.5)).pick(
        request(), candidates[::-1], context(seed=9)
    )
    assert list(first) == list(second)


def test_registry_reads_and_validates_temperature() -> None:
    def make(params: dict[str, object]) -> SoftmaxPicker:
        picker = registry().make_picker("softmax-picker", "s", params)
        assert isinstance(picker, SoftmaxPicker)
        return picker

    assert make({}).temperature == 0.1
    assert make({"temperature": 2}).temperature == 2.0
    for bad in (0, -0.5, "hot", True, math.inf, math.nan, 10**400):
        with pytest.raises(ValueError, match=r"'temperature' must be a finite number and > 0"):
            make({"temperature": bad})
    with pytest.raises(ValueError, match=r"unknown parameter.*'temp'"):
        make({"temp": 1.0})


def test_direct_construction_still_refuses_a_zero_temperature() -> None:
    with pytest.raises(ValueError, match="temperature must be > 0"):
        SoftmaxPicker("s", SoftmaxPicker.Params(0.0))
