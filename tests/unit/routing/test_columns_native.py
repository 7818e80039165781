"""The compiled scheduler columns (weighted sum, unit check, max-score order) against their
Python references."""

from __future__ import annotations

import math
from itertools import pairwise

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from routing.scheduler import in_unit_interval, weighted_totals
from scoring.pickers.max_score import TIE_TOLERANCE, _order

native = pytest.importorskip("routing.columns_native")

# Scores as scorers make them: in [0, 1], with repeats, signed zeros and near-ties.
scores = st.one_of(
    st.floats(0.0, 1.0),
    st.sampled_from([0.0, -0.0, 1.0, 0.5, 1 / 3, 0.1 + 0.2, 1e-10, 1.0 - 1e-12]),
    st.integers(0, 1),
)
weights = st.one_of(st.sampled_from([1.0, 2.0, 4.0, 0.5, 0.0, 1e-3]), st.floats(0.0, 10.0))


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 40).flatmap(lambda n: st.tuples(
    st.just(n), st.lists(st.tuples(weights, st.lists(scores, min_size=n, max_size=n)), max_size=6)
)))  # fmt: skip
def test_weighted_totals_equal_the_reference_bit_for_bit(
    case: tuple[int, list[tuple[float, list[float]]]],
) -> None:
    n, weighted = case
    ws = [w for w, _ in weighted]
    columns = [c for _, c in weighted]
    got = native.weighted_totals(columns, ws, n)
    want = weighted_totals(columns, ws, n)
    assert [x.hex() for x in got] == [float(x).hex() for x in want]


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.one_of(st.floats(-10.0, 10.0), st.sampled_from([0.0, -0.0, 1.0, 3.5])), max_size=600
    )
)
def test_rank_order_equals_the_reference(totals: list[float]) -> None:  # fmt: skip
    # Up to 600: past the merge sort's insertion-sorted runs of 16 and several merge passes.
    order, distinct = native.rank_order(totals, TIE_TOLERANCE)
    want_order, ordered = _order(totals)
    assert order == want_order
    gaps = [a - b for a, b in pairwise(ordered)]
    assert distinct == all(g > TIE_TOLERANCE for g in gaps)
    ids = tuple(f"e{i}" for i in range(len(totals)))
    ranked = native.ranked_ids(ids, totals, TIE_TOLERANCE)
    assert ranked == ([ids[k] for k in want_order] if distinct else None)


def test_ranked_ids_ranks_many_distinct_totals_and_refuses_a_length_mismatch() -> None:
    totals = [((k * 7919) % 1000) / 1000 for k in range(1000)]  # a permutation of 0..0.999
    ids = [f"e{k}" for k in range(1000)]
    ranked = native.ranked_ids(ids, totals, TIE_TOLERANCE)
    assert ranked == sorted(ids, key=lambda e: -totals[int(e[1:])])
    with pytest.raises(ValueError):
        native.ranked_ids(ids[:-1], totals, TIE_TOLERANCE)


def test_a_column_of_the_wrong_length_is_refused() -> None:
    with pytest.raises(ValueError):
        native.weighted_totals([[0.5, 0.5]], [1.0], 3)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.one_of(
            scores, st.floats(allow_nan=True), st.sampled_from([math.nan, -1e-300, 1.0 + 1e-16])
        ),
        min_size=1,
        max_size=40,
    )
)
def test_in_unit_interval_equals_the_reference(column: list[float]) -> None:
    assert native.in_unit_interval(column) == in_unit_interval(column)
