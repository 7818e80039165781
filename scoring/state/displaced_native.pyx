# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False
"""The eviction term's per-candidate walks on the kept tails, compiled.

`walks` is `scoring.state.lru_tails.walks`, the Python reference, in one C loop over the
candidates: the same lookups (a candidate's room, its tail), the same bisection of the tail's
running weights and the same float read off its running values, so the same answers; it
leaves out the interpreter's dispatch, about 0.3 µs a full candidate. A candidate whose tail
it cannot read so (a running weight not a 64-bit int) goes to the caller's walk with the
missed ones, which answers the same; a new weight or a room that is not one makes it answer
None (the reference then runs, writing again what it wrote).
`tests/unit/scoring/state/test_lru_tails.py` compares the two.
"""

from cpython.dict cimport PyDict_GetItem
from cpython.exc cimport PyErr_Clear, PyErr_Occurred
from cpython.list cimport PyList_GET_ITEM, PyList_GET_SIZE
from cpython.long cimport PyLong_AsLongLong, PyLong_CheckExact
from cpython.object cimport PyObject
from cpython.set cimport PySet_Contains


cdef inline bint _plain(PyObject *o, long long *out) noexcept:
    """An exact int that fits in 64 bits, as such; False for anything else (error cleared)."""
    cdef long long v
    if o == NULL or not PyLong_CheckExact(<object>o):
        return False
    v = PyLong_AsLongLong(<object>o)
    if v == -1 and PyErr_Occurred() != NULL:
        PyErr_Clear()
        return False
    out[0] = v
    return True


cdef Py_ssize_t _bisect(list weights, long long x) noexcept:
    """`bisect_left(weights, x)`; -1 where an entry it reads is not a 64-bit int."""
    cdef Py_ssize_t lo = 0, hi = PyList_GET_SIZE(weights), mid
    cdef long long v
    while lo < hi:
        mid = (lo + hi) // 2
        if not _plain(PyList_GET_ITEM(weights, mid), &v):
            return -1
        if v < x:
            lo = mid + 1
        else:
            hi = mid
    return lo


def walks(list replicas, list new_weights, dict rooms, dict kept, hashes, depths, list out,
          never_full):
    """See `scoring.state.lru_tails.walks`."""
    cdef Py_ssize_t n = PyList_GET_SIZE(replicas), k, last, size, d, j
    cdef long long weight, room, excess, total, never
    cdef PyObject *r
    cdef PyObject *got
    cdef list missed = [], spared = [], entries, weights
    cdef object tail, complete, head, sums, values
    if PyList_GET_SIZE(new_weights) != n or PyList_GET_SIZE(out) != n:
        raise ValueError("replicas, new_weights and out differ in length")
    never = never_full
    for k in range(n):
        r = PyList_GET_ITEM(replicas, k)
        if not _plain(PyList_GET_ITEM(new_weights, k), &weight):
            return None
        got = PyDict_GetItem(rooms, <object>r)
        if got == NULL:
            room = never
        elif not _plain(got, &room):
            return None
        if weight <= room:
            continue
        excess = weight - room  # weight + new weight − capacity
        got = PyDict_GetItem(kept, <object>r)
        if got == NULL:
            missed.append((k, excess))
            continue
        tail = <object>got
        sums = tail.weights
        values = tail.values
        if type(sums) is not list or type(values) is not list:
            missed.append((k, excess))  # not summed since a change
            continue
        weights = sums
        complete = tail.complete
        if not complete:
            sums = tail.total
            if not _plain(<PyObject *>sums, &total) or total < excess:
                missed.append((k, excess))  # the caller's walk answers, as the reference's
                continue
        size = PyList_GET_SIZE(weights)
        if size == 0:  # a complete tail with no entry: the replica holds none
            continue
        last = _bisect(weights, excess)
        if last < 0 or PyList_GET_SIZE(values) != size:
            missed.append((k, excess))  # the caller's walk answers
            continue
        if last == size:
            last -= 1
        out[k] = <object>PyList_GET_ITEM(values, last)
        # The matched head's oldest entry is its last block (`scoring.state.prefix_index`).
        d = depths[k]
        if d:
            head = hashes[d - 1]
            if PySet_Contains(tail.members, head) == 1:
                entries = tail.hashes
                for j in range(min(last + 1, PyList_GET_SIZE(entries))):
                    if <object>PyList_GET_ITEM(entries, j) == head:
                        spared.append((k, tail, j))
                        break
    return missed, spared
