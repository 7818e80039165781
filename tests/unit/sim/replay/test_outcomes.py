from __future__ import annotations

import math
import random

import pytest

from routing.percentile import percentile
from sim.replay.outcomes import LatencyHistogram


def test_percentiles_are_within_the_bucket_width() -> None:
    rng = random.Random(1)
    values = sorted(rng.lognormvariate(-4, 0.5) for _ in range(5000))
    hist = LatencyHistogram()
    for v in values:
        hist.add(v)
    for p in (50, 90, 99):
        assert hist.percentile(p) == pytest.approx(percentile(values, p), rel=1.5e-3)
    assert hist.count == 5000 and hist.total_s == pytest.approx(sum(values))
    assert math.isnan(LatencyHistogram().percentile(50))


def test_adding_an_arithmetic_run_equals_adding_each_value() -> None:
    one_by_one, at_once = LatencyHistogram(), LatencyHistogram()
    a, b = 0.0103, 2.7e-7
    for i in range(3, 400):
        one_by_one.add(a + b * i, weight=5)
    at_once.add_linear(a, b, 3, 400, weight=5)
    assert at_once.count == one_by_one.count
    assert at_once.total_s == pytest.approx(one_by_one.total_s)
    for p in (1, 25, 50, 75, 99, 100):
        assert at_once.percentile(p) == one_by_one.percentile(p)
    constant = LatencyHistogram()
    constant.add_linear(0.02, 0.0, 0, 10, 3)
    assert constant.count == 30 and constant.buckets == 1
