from __future__ import annotations

import math
import random
from collections import Counter

from routing import ScoreTable
from scoring.pickers.max_score import MaxScorePicker, rank_by_total
from tests.unit.scoring.helpers import context, request, scored


def test_ranks_by_total_descending() -> None:
    ranked = MaxScorePicker("m").pick(
        request(), scored({"a": 0.2, "b": 0.9, "c": 0.5, "d": 0.0}), context()
    )
    assert list(ranked) == ["b", "c", "a", "d"]


def test_exact_ties_are_broken_at_random() -> None:
    picker = MaxScorePicker("m")
    candidates = scored({"a": 0.7, "b": 0.7, "c": 0.7, "low": 0.1})
    ctx = context(seed=11)
    rankings = [list(picker.pick(request(), candidates, ctx)) for _ in range(3000)]
    firsts = Counter(r[0] for r in rankings)
    assert set(firsts) == {"a", "b", "c"}
    assert all(850 <= n <= 1150 for n in firsts.values()), firsts
    assert all(r[-1] == "low" for r in rankings)


def test_totals_within_tolerance_tie_and_beyond_do_not() -> None:
    near = scored({"a": 0.5, "b": 0.5 + 5e-10})
    far = scored({"a": 0.5, "b": 0.5 + 1e-6})
    near_firsts = {rank_by_total(near, context(seed=s).rng)[0] for s in range(50)}
    far_firsts = {rank_by_total(far, context(seed=s).rng)[0] for s in range(50)}
    assert near_firsts == {"a", "b"}
    assert far_firsts == {"b"}


def test_nan_total_ranks_last() -> None:
    ranked = rank_by_total(scored({"n": math.nan, "a": 0.0, "b": 0.3}), context().rng)
    assert ranked == ["b", "a", "n"]


def test_same_seed_same_ranking_independent_of_input_order() -> None:
    candidates = scored({f"e{i}": float(i % 3) for i in range(9)})
    first = MaxScorePicker("m").pick(request(), candidates, context(seed=5))
    second = MaxScorePicker("m").pick(request(), candidates[::-1], context(seed=5))
    assert list(first) == list(second)


def test_single_and_empty() -> None:
    assert list(MaxScorePicker("m").pick(request(), scored({"x": 0.1}), context())) == ["x"]
    assert list(MaxScorePicker("m").pick(request(), [], context())) == []


def _reference_rank(totals: dict[str, float], rng: random.Random) -> list[str]:
    """The ranking rule written the plain way: sort by (−total, id), shuffle each tie group."""

    def total(i: str) -> float:
        return -math.inf if math.isnan(totals[i]) else totals[i]

    order = sorted(totals, key=lambda i: (-total(i), i))
    ranked: list[str] = []
    while order:
        head = total(order[0])
        size = 1
        while size < len(order) and (
            head == total(order[size]) or head - total(order[size]) <= 1e-9
        ):
            size += 1
        group, order = order[:size], order[size:]
        if len(group) > 1:
            rng.shuffle(group)
        ranked.extend(group)
    return ranked


def test_ranking_equals_the_plain_rule_on_random_totals_and_on_score_tables() -> None:
    gen = random.Random(3)
    values = [0.0, 0.25, 0.5, 0.5 + 4e-10, 0.5 + 2e-9, 1.0, math.nan, -math.inf, 3.0]
    for case in range(300):
        n = gen.randint(0, 40)
        pool = values if case % 2 else [gen.random() * 5 for _ in range(8)]
        totals = {f"e{gen.randrange(1000):03d}": gen.choice(pool) for _ in range(n)}
        expected = _reference_rank(totals, random.Random(case))
        assert rank_by_total(scored(totals), random.Random(case)) == expected
        ids = list(totals)
        table = ScoreTable(ids, ["s"], [list(totals.values())], list(totals.values()))
        assert rank_by_total(table, random.Random(case)) == expected
