from __future__ import annotations

import math

import pytest

from bench.calibrate.errors import ErrorSummary, relative_error


def test_relative_error_is_signed_against_the_measurement() -> None:
    assert relative_error(1.2, 1.0) == pytest.approx(0.2)
    assert relative_error(0.5, 1.0) == pytest.approx(-0.5)
    with pytest.raises(ValueError):
        relative_error(1.0, 0.0)


def test_summary_uses_absolute_errors_and_keeps_the_bias() -> None:
    s = ErrorSummary.of([-0.1, 0.2, -0.3, 0.4, 0.5])
    assert s.n == 5
    assert s.median_abs == pytest.approx(0.3)
    assert s.p90_abs == pytest.approx(0.5)  # nearest rank: the 5th of 5
    assert s.median_signed == pytest.approx(0.2)


def test_summary_of_nothing_is_nan() -> None:
    s = ErrorSummary.of([])
    assert s.n == 0
    assert math.isnan(s.median_abs)
