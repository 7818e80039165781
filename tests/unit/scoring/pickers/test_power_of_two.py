from __future__ import annotations

from collections import Counter

from scoring.pickers.power_of_two import PowerOfTwoPicker
from tests.unit.scoring.helpers import context, request, scored

TOTALS = {"best": 0.9, "good": 0.6, "fair": 0.3, "worst": 0.0}


def _targets(n: int, totals: dict[str, float]) -> Counter[str]:
    picker = PowerOfTwoPicker("p2c")
    ctx = context(seed=21)
    return Counter(picker.pick(request(), scored(totals), ctx)[0] for _ in range(n))


def test_target_probabilities_match_two_random_choices() -> None:
    counts = _targets(6000, TOTALS)
    # With n=4 and 6 equally likely pairs: best wins 3/6, good 2/6, fair 1/6, worst never.
    assert counts["worst"] == 0
    assert 2800 <= counts["best"] <= 3200, counts
    assert 1800 <= counts["good"] <= 2200, counts
    assert 850 <= counts["fair"] <= 1150, counts


def test_fallbacks_are_the_rest_by_total_descending() -> None:
    picker = PowerOfTwoPicker("p2c")
    ctx = context(seed=2)
    for _ in range(50):
        ranked = list(picker.pick(request(), scored(TOTALS), ctx))
        assert sorted(ranked) == sorted(TOTALS)
        rest = ranked[1:]
        assert rest == sorted(rest, key=lambda i: -TOTALS[i])


def test_two_candidates_always_target_the_better() -> None:
    counts = _targets(200, {"hi": 0.8, "lo": 0.2})
    assert counts == Counter({"hi": 200})


def test_tied_pair_is_broken_at_random() -> None:
    counts = _targets(2000, {"a": 0.5, "b": 0.5})
    assert 850 <= counts["a"] <= 1150, counts


def test_single_candidate() -> None:
    assert list(PowerOfTwoPicker("p").pick(request(), scored({"x": 0.0}), context())) == ["x"]
    assert list(PowerOfTwoPicker("p").pick(request(), [], context())) == []


def test_same_seed_same_ranking_independent_of_input_order() -> None:
    candidates = scored({f"e{i}": i / 10 for i in range(7)})
    first = PowerOfTwoPicker("p").pick(request(), candidates, context(seed=9))
    second = PowerOfTwoPicker("p").pick(request(), candidates[::-1], context(seed=9))
    assert list(first) == list(second)
