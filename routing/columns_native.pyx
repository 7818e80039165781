# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False
"""The scheduler's columns, compiled: weighted sum, unit check and the max-score order.

`weighted_totals` is `routing.scheduler.weighted_totals`, `in_unit_interval` is
`routing.scheduler.in_unit_interval`, and `rank_order` / `ranked_ids` are the sort in
`scoring.pickers.max_score.rank_by_total`, with the same float operations in the same order
(built with -ffp-contract=off: no fused multiply-add), so the answers are the same to the
last bit. The Python code is the reference; `tests/unit/routing/test_columns_native.py`
compares the two. Over 512 candidates the Python passes cost ~170 µs a decision, these ~15.
The sort is a merge sort with its comparison inlined (C's qsort, a call per comparison, took
~25 µs over 512), and `ranked_ids` hands the picker its ids in order without a list of
positions between.
"""

from cpython.list cimport PyList_New, PyList_SET_ITEM
from cpython.ref cimport Py_INCREF
from libc.stdlib cimport free, malloc


cdef inline bint _after(const Ranked *x, const Ranked *y) noexcept nogil:
    # Whether x ranks after y: descending by total, equal totals in input order
    # (`sorted(..., reverse=True)`'s order).
    return x.total < y.total or (x.total == y.total and x.index > y.index)


cdef void sort_ranked(Ranked *r, Ranked *tmp, Py_ssize_t n) noexcept nogil:
    # Bottom-up merge sort with the comparison inlined (qsort's call per comparison cost
    # more than the rest of a ranking): insertion-sorted runs of RUN, then merged pairwise.
    cdef Ranked v
    cdef Ranked *src = r
    cdef Ranked *dst = tmp
    cdef Ranked *swap
    cdef Py_ssize_t RUN = 16, lo, hi, mid, i, j, k, width
    lo = 0
    while lo < n:
        hi = min(lo + RUN, n)
        for i in range(lo + 1, hi):
            v = r[i]
            j = i
            while j > lo and _after(&r[j - 1], &v):
                r[j] = r[j - 1]
                j -= 1
            r[j] = v
        lo = hi
    width = RUN
    while width < n:
        lo = 0
        while lo < n:
            mid = min(lo + width, n)
            hi = min(lo + 2 * width, n)
            i, j, k = lo, mid, lo
            while i < mid and j < hi:
                if _after(&src[i], &src[j]):
                    dst[k] = src[j]
                    j += 1
                else:
                    dst[k] = src[i]
                    i += 1
                k += 1
            while i < mid:
                dst[k] = src[i]
                i += 1
                k += 1
            while j < hi:
                dst[k] = src[j]
                j += 1
                k += 1
            lo = hi
        swap = src
        src = dst
        dst = swap
        width *= 2
    if src != r:
        for i in range(n):
            r[i] = src[i]


cdef Ranked *_ranked(list totals, Py_ssize_t n) except NULL:
    # The totals sorted, in a buffer of 2n (the second half the merge's scratch).
    cdef Ranked *r = <Ranked *>malloc(max(2 * n, 1) * sizeof(Ranked))
    if r == NULL:
        raise MemoryError()
    cdef Py_ssize_t i
    try:
        for i in range(n):
            r[i].total = totals[i]
            r[i].index = i
    except BaseException:
        free(r)
        raise
    sort_ranked(r, r + n, n)
    return r


cdef bint distinct_totals(const Ranked *r, Py_ssize_t n, double tolerance) noexcept nogil:
    cdef Py_ssize_t i
    for i in range(n - 1):
        if not (r[i].total - r[i + 1].total > tolerance):
            return False
    return True


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
    cdef Ranked *r = _ranked(totals, n)
    try:
        return [r[i].index for i in range(n)], distinct_totals(r, n, tolerance)
    finally:
        free(r)


def ranked_ids(object ids, list totals, double tolerance):
    """`ids` by total descending when each total exceeds the next by more than `tolerance`
    (the order `rank_order` gives), else None: there are ties to shuffle. No NaN allowed."""
    cdef Py_ssize_t n = len(totals), i
    if len(ids) != n:
        raise ValueError("one total per id")
    cdef Ranked *r = _ranked(totals, n)
    cdef object item
    cdef list out
    try:
        if not distinct_totals(r, n, tolerance):
            return None
        out = PyList_New(n)
        for i in range(n):
            item = ids[r[i].index]
            Py_INCREF(item)
            PyList_SET_ITEM(out, i, item)
        return out
    finally:
        free(r)


def in_unit_interval(list column):
    """Whether every score is a number in [0, 1] (no NaN): `routing.scheduler`'s
    `_in_unit_interval`, in one pass. Items that are not floats are converted as Python's
    comparisons convert them (an int is compared by value)."""
    cdef Py_ssize_t i
    cdef double x
    for i in range(len(column)):
        x = column[i]
        if not (x >= 0.0 and x <= 1.0):  # NaN fails both
            return False
    return True
