"""Least squares and non-negative least squares in pure Python, for a handful of columns.

`lstsq` solves min ‖Ax − b‖ by Householder QR (better conditioned than normal equations);
`nnls` is Lawson and Hanson's active-set algorithm (1974) on top of it, with columns scaled to
unit norm first, since the step-time features span nine orders of magnitude. Written by hand
so the calibration's fit runs — and is unit tested — without numpy.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

Matrix = Sequence[Sequence[float]]


def lstsq(a: Matrix, b: Sequence[float]) -> list[float]:
    """Least-squares solution of a·x ≈ b (rows ≥ columns; rank-deficient columns get 0)."""
    m = len(a)
    n = len(a[0]) if m else 0
    if m < n:
        raise ValueError(f"need at least as many rows ({m}) as columns ({n})")
    r = [list(map(float, row)) for row in a]
    y = [float(v) for v in b]
    for k in range(n):
        norm = math.sqrt(sum(r[i][k] ** 2 for i in range(k, m)))
        if norm == 0.0:
            continue
        alpha = -norm if r[k][k] >= 0 else norm
        v = [0.0] * m
        v[k] = r[k][k] - alpha
        for i in range(k + 1, m):
            v[i] = r[i][k]
        vnorm2 = sum(v[i] ** 2 for i in range(k, m))
        if vnorm2 == 0.0:
            continue
        for j in range(k, n):
            s = 2.0 * sum(v[i] * r[i][j] for i in range(k, m)) / vnorm2
            for i in range(k, m):
                r[i][j] -= s * v[i]
        s = 2.0 * sum(v[i] * y[i] for i in range(k, m)) / vnorm2
        for i in range(k, m):
            y[i] -= s * v[i]
    scale = max((abs(r[i][i]) for i in range(n)), default=0.0)
    x = [0.0] * n
    for k in reversed(range(n)):
        if abs(r[k][k]) <= 1e-12 * scale:
            continue  # a column dependent on the others: leave its coefficient at 0
        x[k] = (y[k] - sum(r[k][j] * x[j] for j in range(k + 1, n))) / r[k][k]
    return x


def nnls(a: Matrix, b: Sequence[float], max_iter: int = 200) -> list[float]:
    """min ‖a·x − b‖ subject to x ≥ 0 (Lawson–Hanson)."""
    m = len(a)
    n = len(a[0]) if m else 0
    norms = [math.sqrt(sum(a[i][j] ** 2 for i in range(m))) or 1.0 for j in range(n)]
    s = [[a[i][j] / norms[j] for j in range(n)] for i in range(m)]
    bb = [float(v) for v in b]
    x = [0.0] * n
    passive: list[int] = []
    tol = 1e-10 * max(1.0, math.sqrt(sum(v * v for v in bb)))
    for _ in range(max_iter):
        resid = [bb[i] - sum(s[i][j] * x[j] for j in range(n)) for i in range(m)]
        grad = [sum(s[i][j] * resid[i] for i in range(m)) for j in range(n)]
        candidates = [j for j in range(n) if j not in passive and grad[j] > tol]
        if not candidates:
            break
        passive.append(max(candidates, key=lambda j: grad[j]))
        while True:
            z_sub = lstsq([[row[j] for j in passive] for row in s], bb)
            z = [0.0] * n
            for j, v in zip(passive, z_sub, strict=True):
                z[j] = v
            if all(z[j] > 0 for j in passive):
                x = z
                break
            # Step from x toward z until the first passive coefficient hits zero; drop it.
            steps = [x[j] / (x[j] - z[j]) for j in passive if z[j] <= 0 and x[j] != z[j]]
            t = min(steps, default=0.0)
            x = [x[j] + t * (z[j] - x[j]) for j in range(n)]
            passive = [j for j in passive if x[j] > 1e-15]
            for j in range(n):
                if j not in passive:
                    x[j] = 0.0
            if not passive:
                break
    return [x[j] / norms[j] for j in range(n)]
