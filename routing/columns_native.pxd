# What `columns_native.pyx` shares with other compiled modules (`scoring.fused_native`).

cdef struct Ranked:
    double total
    Py_ssize_t index

# Descending by total, equal totals in input order (`sorted(..., reverse=True)`); `tmp` holds
# n more as scratch.
cdef void sort_ranked(Ranked *r, Ranked *tmp, Py_ssize_t n) noexcept nogil
# Whether each sorted total exceeds the next by more than `tolerance` (no ties to shuffle).
cdef bint distinct_totals(const Ranked *r, Py_ssize_t n, double tolerance) noexcept nogil
