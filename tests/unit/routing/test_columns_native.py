"""The compiled weighted sum and max-score order against their Python references."""

from __future__ import annotations

from itertools import pairwise

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from routing.scheduler import weighted_totals
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
    st.lists(st.one_of(st.floats(-10.0, 10.0), st.sampled_from([0.0, -0.0, 1.0, 3.5])), max_size=60)
)
def test_rank_order_equals_the_reference(totals: list[float]) -> None:  # fmt: skip
    order, distinct = native.rank_order(totals, TIE_TOLERANCE)
    want_order, ordered = _order(totals)
    assert order == want_order
    gaps = [a - b for a, b in pairwise(ordered)]
    assert distinct == all(g > TIE_TOLERANCE for g in gaps)


def test_a_column_of_the_wrong_length_is_refused() -> None:
    with pytest.raises(ValueError):
        native.weighted_totals([[0.5, 0.5]], [1.0], 3)
