from __future__ import annotations

import math

import pytest

from scoring.params import number_param


def test_default_when_absent_and_ints_become_floats() -> None:
    assert number_param({}, "t", 0.1, gt=0.0) == 0.1
    value = number_param({"t": 3}, "t", 0.1, gt=0.0)
    assert value == 3.0 and isinstance(value, float)


def test_bounds_are_inclusive_or_exclusive_as_named() -> None:
    assert number_param({"x": 0}, "x", 1.0, ge=0.0, le=1.0) == 0.0
    assert number_param({"x": 1}, "x", 1.0, ge=0.0, le=1.0) == 1.0
    with pytest.raises(ValueError, match=r"parameter 'x' must be a finite number and > 0, got 0"):
        number_param({"x": 0}, "x", 1.0, gt=0.0)
    with pytest.raises(ValueError, match=r"and >= 0 and <= 1, got 1.5"):
        number_param({"x": 1.5}, "x", 1.0, ge=0.0, le=1.0)


@pytest.mark.parametrize(
    "bad", [True, False, "5", None, [1], math.nan, math.inf, -math.inf, 10**400]
)
def test_rejects_non_numbers_bools_and_non_finite(bad: object) -> None:
    with pytest.raises(ValueError, match=r"parameter 'x' must be a finite number"):
        number_param({"x": bad}, "x", 1.0)
