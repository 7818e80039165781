# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False
"""The scheduler's weighted sum and the max-score order, compiled.

`weighted_totals` is `routing.scheduler.weighted_totals` and `rank_order` is the sort in
`scoring.pickers.max_score.rank_by_total`, with the same float operations in the same order
(built with -ffp-contract=off: no fused multiply-add), so the answers are the same to the
last bit. The Python code is the reference; `tests/unit/routing/test_columns_native.py`
compares the two. Over 512 candidates the Python passes cost ~170 µs a decision, these ~15.
"""

from libc.stdlib cimport free, malloc, qsort


cdef struct Ranked:
    double total
    Py_ssize_t index


cdef int _before(const void *a, const void *b) noexcept nogil:
    # Descending by total, equal totals in input order: `sorted(..., reverse=True)`'s order.
    cdef const Ranked *x = <const Ranked *>a
    cdef const Ranked *y = <const Ranked *>b
    if x.total > y.total:
        return -1
    if x.total < y.total:
        return 1
    return -1 if x.index < y.index else (1 if x.index > y.index else 0)


def weighted_totals(list columns, list weights, Py_ssize_t n):
    """Per candidate i: 0.0 + w_0 × c_0[i] + w_1 × c_1[i] + … in column order (a weight of
    exactly 1 multiplies nothing). Columns are lists of n floats (ints are converted as
    Python's float arithmetic converts them)."""
    cdef double *t = <double *>malloc(max(n, 1) * sizeof(double))
    if t == NULL:
        raise MemoryError()
    cdef Py_ssize_t i, k
    cdef double w
    cdef list column
    try:
        for i in range(n):
            t[i] = 0.0
        for k in range(len(columns)):
            column = columns[k]
            if len(column) != n:
                raise ValueError("a column needs one score per candidate")
            w = weights[k]
            if w == 1.0:
                for i in range(n):
                    t[i] = t[i] + <double>column[i]
            else:
                for i in range(n):
                    t[i] = t[i] + w * <double>column[i]
        return [t[i] for i in range(n)]
    finally:
        free(t)


def rank_order(list totals, double tolerance):
    """Candidate positions by total descending (equal totals in input order), and whether each
    total exceeds the next by more than `tolerance` (no ties to shuffle). No NaN allowed."""
    cdef Py_ssize_t n = len(totals), i
    cdef Ranked *r = <Ranked *>malloc(max(n, 1) * sizeof(Ranked))
    if r == NULL:
        raise MemoryError()
    cdef bint distinct = True
    try:
        for i in range(n):
            r[i].total = totals[i]
            r[i].index = i
        qsort(r, n, sizeof(Ranked), _before)
        for i in range(n - 1):
            if not (r[i].total - r[i + 1].total > tolerance):
                distinct = False
                break
        return [r[i].index for i in range(n)], distinct
    finally:
        free(r)
