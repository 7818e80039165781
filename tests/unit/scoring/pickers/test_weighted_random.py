from __future__ import annotations

import math
from collections import Counter

from scoring.pickers.weighted_random import WeightedRandomPicker
from tests.unit.scoring.helpers import context, request, scored


def _targets(n: int, totals: dict[str, float], seed: int = 11) -> Counter[str]:
    picker = WeightedRandomPicker("w")
    ctx = context(seed=seed)
    return Counter(picker.pick(request(), scored(totals), ctx)[0] for _ in range(n))


def _within(count: int, n: int, p: float) -> bool:
    """Count within 5 standard deviations of the binomial mean n·p."""
    return abs(count - n * p) <= 5 * math.sqrt(n * p * (1 - p))


def test_target_frequency_is_proportional_to_total() -> None:
    n = 8000
    counts = _targets(n, {"a": 3.0, "b": 1.0, "c": 0.0})
    assert counts["c"] == 0  # a zero total is never the target while another is positive
    assert _within(counts["a"], n, 0.75), counts
    assert _within(counts["b"], n, 0.25), counts


def test_all_zero_is_uniform() -> None:
    n = 6000
    counts = _targets(n, {"a": 0.0, "b": 0.0, "c": 0.0})
    assert all(_within(counts[i], n, 1 / 3) for i in "abc"), counts


def test_nan_and_negative_totals_count_as_zero() -> None:
    counts = _targets(500, {"nan": math.nan, "neg": -1.0, "ok": 0.2})
    assert counts == Counter({"ok": 500})


def test_fallbacks_are_the_rest_by_total_descending() -> None:
    totals = {"a": 0.9, "b": 0.6, "c": 0.3, "d": 0.1}
    picker = WeightedRandomPicker("w")
    ctx = context(seed=4)
    targets = set()
    for _ in range(200):
        ranked = list(picker.pick(request(), scored(totals), ctx))
        assert sorted(ranked) == sorted(totals)
        targets.add(ranked[0])
        assert ranked[1:] == sorted(ranked[1:], key=lambda i: -totals[i])
    assert targets == set(totals)


def test_single_candidate_and_empty() -> None:
    assert list(WeightedRandomPicker("w").pick(request(), scored({"x": 0.0}), context())) == ["x"]
    assert list(WeightedRandomPicker("w").pick(request(), [], context())) == []


def test_same_seed_same_ranking_independent_of_input_order() -> None:
    candidates = scored({f"e{i}": i / 10 for i in range(7)})
    first = WeightedRandomPicker("w").pick(request(), candidates, context(seed=9))
    second = WeightedRandomPicker("w").pick(request(), candidates[::-1], context(seed=9))
    assert list(first) == list(second)
