from __future__ import annotations

import math

import pytest

from sim.calibrate.errors import ErrorSummary, percentile, relative_error


def test_relative_error_is_signed_against_the_measurement() -> None:
    assert relative_error(1.2, 1.0) == pytest.approx(0.2)
    assert relative_error(0.5, 1.0) == pytest.approx(-0.5)
    with pytest.raises(ValueError):
        relative_error(1.0, 0.0)


@pytest.mark.parametrize(
    ("values", "q", "expected"),
    [
        ([1, 2, 3, 4], 50, 2.5),
        (list(range(1, 11)), 90, 9.1),
        ([3, 1, 2], 0, 1),
        ([3, 1, 2], 100, 3),
        ([7], 90, 7),
    ],
)
def test_percentile_interpolates_linearly(values: list[float], q: float, expected: float) -> None:
    assert percentile(values, q) == pytest.approx(expected)


def test_percentile_rejects_bad_input() -> None:
    with pytest.raises(ValueError):
        percentile([], 50)
    with pytest.raises(ValueError):
        percentile([1.0], 101)


def test_summary_uses_absolute_errors_and_keeps_the_bias() -> None:
    s = ErrorSummary.of([-0.1, 0.2, -0.3, 0.4, 0.5])
    assert s.n == 5
    assert s.median_abs == pytest.approx(0.3)
    assert s.p90_abs == pytest.approx(0.46)
    assert s.median_signed == pytest.approx(0.2)


def test_summary_of_nothing_is_nan() -> None:
    s = ErrorSummary.of([])
    assert s.n == 0
    assert math.isnan(s.median_abs)
