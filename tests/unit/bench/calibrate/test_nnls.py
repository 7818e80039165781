from __future__ import annotations

import itertools
import random

import pytest

from bench.calibrate.nnls import lstsq, nnls


def _residual(a: list[list[float]], x: list[float], b: list[float]) -> float:
    return sum(
        (sum(r * v for r, v in zip(row, x, strict=True)) - y) ** 2
        for row, y in zip(a, b, strict=True)
    )


def test_lstsq_solves_an_exact_system() -> None:
    a = [[2.0, 1.0], [1.0, 3.0], [0.0, 1.0]]
    x_true = [1.5, -0.5]
    b = [sum(r * v for r, v in zip(row, x_true, strict=True)) for row in a]
    assert lstsq(a, b) == pytest.approx(x_true)


def test_lstsq_leaves_a_dependent_column_at_zero() -> None:
    a = [[1.0, 2.0], [2.0, 4.0], [3.0, 6.0]]
    x = lstsq(a, [2.0, 4.0, 6.0])
    assert _residual(a, x, [2.0, 4.0, 6.0]) == pytest.approx(0.0, abs=1e-18)


def test_lstsq_needs_enough_rows() -> None:
    with pytest.raises(ValueError, match="rows"):
        lstsq([[1.0, 2.0]], [1.0])


def test_nnls_equals_lstsq_when_the_solution_is_positive() -> None:
    rng = random.Random(1)
    a = [[rng.uniform(0, 1) for _ in range(3)] for _ in range(20)]
    x_true = [0.5, 2.0, 1.0]
    b = [sum(r * v for r, v in zip(row, x_true, strict=True)) for row in a]
    assert nnls(a, b) == pytest.approx(x_true, rel=1e-9)


def test_nnls_clamps_and_matches_the_best_active_set() -> None:
    rng = random.Random(2)
    a = [[rng.uniform(-1, 1) for _ in range(4)] for _ in range(15)]
    b = [rng.uniform(-1, 1) for _ in range(15)]
    x = nnls(a, b)
    assert min(x) >= 0
    # Brute force: the best non-negative least-squares solution over every subset of columns.
    best = float("inf")
    for k in range(5):
        for cols in itertools.combinations(range(4), k):
            sub = lstsq([[row[j] for j in cols] for row in a], b) if cols else []
            if any(v < 0 for v in sub):
                continue
            full = [0.0] * 4
            for j, v in zip(cols, sub, strict=True):
                full[j] = v
            best = min(best, _residual(a, full, b))
    assert _residual(a, x, b) == pytest.approx(best, rel=1e-9)


def test_nnls_handles_columns_of_very_different_scale() -> None:
    # Like the step-time features: a constant next to token counts and token pairs.
    a = [[1.0, float(p), float(p * p)] for p in (64, 256, 512, 1024, 2048, 3072)]
    x_true = [5e-3, 1.5e-4, 4e-8]
    b = [sum(r * v for r, v in zip(row, x_true, strict=True)) for row in a]
    assert nnls(a, b) == pytest.approx(x_true, rel=1e-6)
