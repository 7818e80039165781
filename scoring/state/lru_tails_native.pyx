# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False
"""The eviction term's search for spared heads, compiled (`scoring.state.lru_tails`).

`spared_hits(where, hashes, walked, depths)` is `LruTails.spared_by_hits` with the prompt's
head looked up in the same pass: which candidates' walks take an entry of their own matched
head, and the least sequence number of such an entry. The Python search is the reference:
`tests/unit/scoring/state/test_lru_tails.py` compares the two.
"""

from cpython.dict cimport PyDict_GetItemWithError
from cpython.exc cimport PyErr_Clear, PyErr_Occurred
from cpython.list cimport PyList_GET_SIZE
from cpython.long cimport PyLong_AsLongLong, PyLong_CheckExact
from cpython.object cimport PyObject
from libc.stdlib cimport free, malloc, qsort


ctypedef struct Span:
    long long first  # the sequence numbers of a candidate's tail's first entry
    long long end  # and of the last its walk takes
    long long depth  # its matched head, in blocks
    long long least  # the least sequence number of an entry of its head it walks, or -1
    Py_ssize_t key  # its position among the candidates


cdef int _by_first(const void *a, const void *b) noexcept nogil:
    cdef long long x = (<const Span *>a).first, y = (<const Span *>b).first
    return (x > y) - (x < y)


cdef bint _spare(Span *spans, Py_ssize_t n, Py_ssize_t p, object item) except? False:
    """Sequence number `item`, met at prompt position `p`: the least spared of the span
    whose walk takes it, if within that candidate's head. False for anything but a
    sequence number."""
    cdef Py_ssize_t lo = 0, hi = n, mid, j
    cdef long long q
    if not PyLong_CheckExact(item):
        return False
    q = PyLong_AsLongLong(item)
    if q < 0:  # an overflow (-1 with an error set) or not a sequence number
        if PyErr_Occurred() != NULL:
            PyErr_Clear()
        return False
    while lo < hi:  # the last span starting at or before q
        mid = (lo + hi) // 2
        if spans[mid].first <= q:
            lo = mid + 1
        else:
            hi = mid
    j = lo - 1
    if j < 0 or q > spans[j].end or p >= spans[j].depth:
        return True  # no candidate's walk, past it, or beyond its matched head
    if spans[j].least < 0 or q < spans[j].least:
        spans[j].least = q
    return True


def spared_hits(dict where, hashes, dict walked, depths):
    """`scoring.state.lru_tails.LruTails.spared_by_hits`, with the prompt's head looked up
    in the same pass: `walked` maps candidates to (replica, tail, the last entry its walk
    takes), `where` hashes to a sequence number or a set of them. {candidate: the least
    sequence number of an entry of its matched head `hashes[:depths[k]]` that its walk
    takes}; False when the holders met outnumber the candidates' walked entries (walking
    those is then cheaper); None for anything but the values `where` and the tails hold (the
    caller's reference runs)."""
    cdef Py_ssize_t n = len(walked), p, i, j, m, reach = 0, cost = 0
    cdef Py_ssize_t budget = n
    cdef long long last
    cdef Span *spans = NULL
    cdef PyObject *held
    cdef PyObject **found = NULL
    cdef Py_ssize_t *at = NULL
    if n == 0:
        return {}
    spans = <Span *>malloc(n * sizeof(Span))
    if spans == NULL:
        raise MemoryError()
    try:
        j = 0
        for key, value in walked.items():
            _, tail, last = value
            seqs = tail.seqs
            if type(seqs) is not list or last < 0 or last >= PyList_GET_SIZE(seqs):
                return None
            spans[j].first = seqs[0]
            spans[j].end = seqs[last]
            spans[j].depth = depths[key]
            spans[j].least = -1
            spans[j].key = key
            if spans[j].depth > reach:
                reach = spans[j].depth
            budget += last
            j += 1
        qsort(spans, n, sizeof(Span), _by_first)
        seq = hashes if type(hashes) is tuple or type(hashes) is list else list(hashes)
        if reach > len(seq):
            reach = len(seq)
        # First the lookups, counting the holders met: walking the candidates' entries may
        # be cheaper than visiting them (`where` is not changed in between: no Python runs).
        found = <PyObject **>malloc(reach * sizeof(PyObject *) + 1)
        at = <Py_ssize_t *>malloc(reach * sizeof(Py_ssize_t) + 1)
        if found == NULL or at == NULL:
            raise MemoryError()
        m = 0
        for p in range(reach):
            held = PyDict_GetItemWithError(where, seq[p])
            if held == NULL:
                if PyErr_Occurred() != NULL:
                    return None
                continue
            if PyLong_CheckExact(<object>held):
                cost += 1
            elif type(<object>held) is set:
                cost += len(<object>held)
            else:
                return None
            found[m] = held
            at[m] = p
            m += 1
        if cost > budget:
            return False
        for i in range(m):
            held = found[i]
            if PyLong_CheckExact(<object>held):
                if not _spare(spans, n, at[i], <object>held):
                    return None
            else:
                for item in <object>held:
                    if not _spare(spans, n, at[i], item):
                        return None
        return {spans[j].key: spans[j].least for j in range(n) if spans[j].least >= 0}
    finally:
        free(spans)
        free(found)
        free(at)
