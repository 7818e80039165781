"""The one percentile rule: nearest rank, no interpolation."""

from __future__ import annotations

import math

import pytest

from routing.percentile import percentile

ONE_TO_TEN = [float(x) for x in range(1, 11)]


@pytest.mark.parametrize(
    ("p", "expected"),
    [(0, 1.0), (10, 1.0), (50, 5.0), (55, 6.0), (90, 9.0), (91, 10.0), (99, 10.0), (100, 10.0)],
)
def test_percentile_of_one_to_ten_is_the_value_of_rank_ceil_p_n(p: float, expected: float) -> None:
    assert percentile(ONE_TO_TEN, p) == expected


def test_order_of_the_input_does_not_matter() -> None:
    assert percentile(reversed(ONE_TO_TEN), 90) == 9.0
    assert percentile([4.0, 1.0, 3.0, 2.0], 50) == 2.0


def test_a_single_value_is_every_percentile_and_none_is_nan() -> None:
    assert percentile([7.0], 1) == percentile([7.0], 99) == 7.0
    assert math.isnan(percentile([], 50))
