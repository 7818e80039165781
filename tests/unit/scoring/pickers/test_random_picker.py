from __future__ import annotations

import itertools
from collections import Counter

from scoring.pickers.random_picker import RandomPicker
from tests.unit.scoring.helpers import context, request, scored


def test_returns_a_permutation_regardless_of_scores() -> None:
    ranked = RandomPicker("r").pick(request(), scored({"a": 1.0, "b": 0.0, "c": 0.5}), context())
    assert sorted(ranked) == ["a", "b", "c"]


def test_every_ranking_is_about_equally_likely() -> None:
    picker = RandomPicker("r")
    candidates = scored({"a": 1.0, "b": 0.0, "c": 0.0})
    ctx = context(seed=7)
    counts = Counter(tuple(picker.pick(request(), candidates, ctx)) for _ in range(6000))
    assert set(counts) == set(itertools.permutations("abc"))
    # Expected 1000 each; +-150 is more than 5 standard deviations (sd ~ 29).
    assert all(850 <= n <= 1150 for n in counts.values()), counts


def test_same_seed_same_ranking_independent_of_input_order() -> None:
    candidates = scored({f"e{i}": 0.0 for i in range(8)})
    first = RandomPicker("r").pick(request(), candidates, context(seed=3))
    second = RandomPicker("r").pick(request(), list(reversed(candidates)), context(seed=3))
    other_seed = RandomPicker("r").pick(request(), candidates, context(seed=4))
    assert first == second
    assert first != other_seed
