# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False, cdivision=True
"""The default profile's per-candidate arithmetic in one compiled pass (`scoring.fused`).

`Kernel.gather` reads every candidate's snapshot once (slot reads by offset: no attribute
lookup) and applies the load-imbalance filter; `Kernel.columns` computes the estimated-TTFT,
prefix-match, in-flight, KV-utilization and cache-headroom columns, their weighted totals
and the max-score order from what the prefix index and the TTFT model answered (the
columns are `Column`s: float objects made only for the items read). The same float
operations in the same order as the plugins (built with -ffp-contract=off), so the columns
are the plugins' to the last bit; where a value is not a plain number, or a plugin would take its rare branch
(unknown KV usage, a NaN estimate), either call answers None and the plugins run instead.
The plugins are the reference: `tests/unit/scoring/test_fused.py` compares the two.
"""

from cpython.float cimport PyFloat_AS_DOUBLE, PyFloat_CheckExact, PyFloat_FromDouble
from cpython.list cimport PyList_GET_ITEM, PyList_GET_SIZE, PyList_New, PyList_SET_ITEM
from cpython.long cimport PyLong_AsLongLong, PyLong_CheckExact
from cpython.object cimport PyObject
from cpython.exc cimport PyErr_Clear, PyErr_Occurred
from cpython.ref cimport Py_INCREF
from cpython.tuple cimport PyTuple_New, PyTuple_SET_ITEM
from libc.math cimport isnan
from libc.stdlib cimport free, malloc
from libc.string cimport memcpy

from routing.columns_native cimport Ranked, distinct_totals, sort_ranked

cdef extern from *:
    """
    #include <structmember.h>
    /* The byte offset of a __slots__ member (its descriptor's), or -1 for anything else. */
    static Py_ssize_t kvgate_slot_offset(PyObject *descr) {
        if (Py_TYPE(descr) != &PyMemberDescr_Type) return -1;
        PyMemberDef *m = ((PyMemberDescrObject *)descr)->d_member;
        if (m->type != T_OBJECT_EX) return -1;
        return m->offset;
    }
    static inline PyObject *kvgate_slot(PyObject *obj, Py_ssize_t offset) {
        return *(PyObject **)((char *)obj + offset);
    }
    static inline void *kvgate_type(PyObject *obj) {
        return (void *)Py_TYPE(obj);
    }
    """
    Py_ssize_t kvgate_slot_offset(PyObject *descr)
    PyObject *kvgate_slot(PyObject *obj, Py_ssize_t offset)
    void *kvgate_type(PyObject *obj)

DEF MAX_SCORERS = 8
DEF MAX_DEPTHS = 64  # distinct match depths remembered per decision

# Scorer kinds (`scoring.fused` maps the plugins to them).
TTFT, PREFIX, IN_FLIGHT, KV, HEADROOM = 0, 1, 2, 3, 4

cdef inline bint _number(PyObject *o, double *out) noexcept:
    """A float, or an int converting exactly, as a double; False for anything else."""
    cdef long long v
    if o == NULL:
        return False
    if PyFloat_CheckExact(<object>o):
        out[0] = PyFloat_AS_DOUBLE(<object>o)
        return True
    if PyLong_CheckExact(<object>o):
        v = PyLong_AsLongLong(<object>o)
        if v == -1 and _overflowed():
            return False
        if v > 9007199254740992 or v < -9007199254740992:  # beyond 2**53: not exact
            return False
        out[0] = <double>v
        return True
    return False


cdef bint _overflowed() noexcept:
    if PyErr_Occurred() != NULL:
        PyErr_Clear()
        return True
    return False


cdef Py_ssize_t _offset(type cls, str name) except -1:
    cdef object descr = cls.__dict__.get(name)
    if descr is None:
        raise TypeError(f"{cls.__name__}.{name} is not a slot")
    cdef Py_ssize_t off = kvgate_slot_offset(<PyObject *>descr)
    if off < 0:
        raise TypeError(f"{cls.__name__}.{name} is not a slot")
    return off


cdef inline double _clamp(double x) noexcept:
    if isnan(x) or x < 0.0:
        return 0.0
    return 1.0 if x > 1.0 else x


cdef class Column:
    """A read-only sequence of floats over a C array: a score column or the totals, whose
    float objects are made only for the items read (most decisions read two or three)."""

    cdef double *data
    cdef Py_ssize_t n

    def __cinit__(self):
        self.data = NULL
        self.n = 0

    def __dealloc__(self):
        free(self.data)

    def __len__(self):
        return self.n

    def __getitem__(self, key):
        cdef Py_ssize_t i
        if isinstance(key, slice):
            return [self.data[i] for i in range(*key.indices(self.n))]
        i = key
        if i < 0:
            i += self.n
        if not 0 <= i < self.n:
            raise IndexError("column index out of range")
        return self.data[i]

    def __iter__(self):
        cdef Py_ssize_t i
        for i in range(self.n):
            yield self.data[i]

    def __reversed__(self):
        cdef Py_ssize_t i
        for i in range(self.n - 1, -1, -1):
            yield self.data[i]

    def __contains__(self, value):
        return value in list(self)

    def index(self, value, start=0, stop=None):
        return list(self).index(value, start, self.n if stop is None else stop)

    def count(self, value):
        return list(self).count(value)

    def __eq__(self, other):
        if isinstance(other, (Column, list, tuple)):
            return list(self) == list(other)
        return NotImplemented

    __hash__ = None

    def __repr__(self):
        return f"Column({list(self)!r})"

    def __reduce__(self):
        return column, (list(self),)


def column(values):
    """A `Column` holding `values` (floats)."""
    cdef Py_ssize_t n = len(values), i
    cdef Column out = Column.__new__(Column)
    out.data = <double *>malloc(max(n, 1) * sizeof(double))
    if out.data == NULL:
        raise MemoryError()
    for i in range(n):
        out.data[i] = values[i]
    out.n = n
    return out


cdef Column _column_of(const double *data, Py_ssize_t n):
    cdef Column out = Column.__new__(Column)
    out.data = <double *>malloc(max(n, 1) * sizeof(double))
    if out.data == NULL:
        raise MemoryError()
    memcpy(out.data, data, n * sizeof(double))
    out.n = n
    return out


cdef class Kernel:
    """One profile's filter and scorers over C arrays, reused from decision to decision."""

    cdef type snapshot_type, metrics_type, line_type
    cdef Py_ssize_t o_id, o_in_flight, o_remote_in_flight, o_pending, o_remote_pending
    cdef Py_ssize_t o_metrics, o_waiting, o_kv, o_overhead, o_slope
    cdef bint filtering, need_kv
    cdef double abs_threshold, rel_threshold
    cdef int n_scorers
    cdef int kinds[MAX_SCORERS]
    cdef double weights[MAX_SCORERS]
    cdef double eviction_weight, tie_tolerance
    cdef Py_ssize_t cap, n
    cdef Ranked *ranked  # 2 × cap: the totals in order, and the merge's scratch
    # per kept candidate, in order
    cdef double *count  # in_flight + remote_in_flight
    cdef double *pending
    cdef double *remote_pending
    cdef double *free_kv  # 1 − kv_usage
    cdef double *load  # per input candidate (the filter's)
    cdef double *est
    cdef double *totals

    def __cinit__(self):
        self.cap = 0
        self.count = self.pending = self.remote_pending = NULL
        self.free_kv = self.load = self.est = self.totals = NULL
        self.ranked = NULL

    def __init__(self, type snapshot_type, type metrics_type, type line_type, filtering,
                 double abs_threshold, double rel_threshold, kinds, weights,
                 double eviction_weight, double tie_tolerance):
        if len(kinds) != len(weights) or not 0 < len(kinds) <= MAX_SCORERS:
            raise ValueError(f"between 1 and {MAX_SCORERS} scorers, one weight each")
        self.snapshot_type, self.metrics_type, self.line_type = (
            snapshot_type, metrics_type, line_type
        )
        self.o_id = _offset(snapshot_type, "id")
        self.o_in_flight = _offset(snapshot_type, "in_flight")
        self.o_remote_in_flight = _offset(snapshot_type, "remote_in_flight")
        self.o_pending = _offset(snapshot_type, "pending_prefill_tokens")
        self.o_remote_pending = _offset(snapshot_type, "remote_pending_prefill_tokens")
        self.o_metrics = _offset(snapshot_type, "metrics")
        self.o_waiting = _offset(metrics_type, "waiting")
        self.o_kv = _offset(metrics_type, "kv_usage")
        self.o_overhead = _offset(line_type, "overhead_s")
        self.o_slope = _offset(line_type, "prefill_token_s")
        self.filtering = bool(filtering)
        self.abs_threshold, self.rel_threshold = abs_threshold, rel_threshold
        self.n_scorers = len(kinds)
        self.need_kv = False
        for k in range(self.n_scorers):
            self.kinds[k] = kinds[k]
            self.weights[k] = weights[k]
            if kinds[k] == KV:
                self.need_kv = True
        self.eviction_weight = eviction_weight
        self.tie_tolerance = tie_tolerance

    def __dealloc__(self):
        self._release()

    cdef void _release(self) noexcept:
        free(self.count)
        free(self.pending)
        free(self.remote_pending)
        free(self.free_kv)
        free(self.load)
        free(self.est)
        free(self.totals)
        free(self.ranked)
        self.ranked = NULL
        self.count = self.pending = self.remote_pending = NULL
        self.free_kv = self.load = self.est = self.totals = NULL
        self.cap = 0

    cdef int _reserve(self, Py_ssize_t n) except -1:
        if n <= self.cap:
            return 0
        self._release()
        cdef Py_ssize_t cap = max(n, 64)
        cdef size_t size = cap * sizeof(double)
        self.count = <double *>malloc(size)
        self.pending = <double *>malloc(size)
        self.remote_pending = <double *>malloc(size)
        self.free_kv = <double *>malloc(size)
        self.load = <double *>malloc(size)
        self.est = <double *>malloc(size)
        self.totals = <double *>malloc(size)
        self.ranked = <Ranked *>malloc(2 * cap * sizeof(Ranked))
        if (self.ranked == NULL or self.count == NULL or self.pending == NULL or self.remote_pending == NULL
                or self.free_kv == NULL or self.load == NULL or self.est == NULL
                or self.totals == NULL):
            self._release()
            raise MemoryError()
        self.cap = cap
        return 0

    def gather(self, list endpoints):
        """(kept, ids, filtered): the candidates the filter keeps (`endpoints` itself when it
        drops none), their ids as a tuple, and whether it dropped any; None when a candidate
        is not a plain snapshot (the plugins run)."""
        cdef Py_ssize_t n = PyList_GET_SIZE(endpoints), i, j
        cdef PyObject *e
        cdef PyObject *m
        cdef double a, b, w, low, high, above
        self._reserve(n)
        for i in range(n):
            e = PyList_GET_ITEM(endpoints, i)
            if kvgate_type(e) != <void *>self.snapshot_type:
                return None
            if not (_number(kvgate_slot(e, self.o_in_flight), &a)
                    and _number(kvgate_slot(e, self.o_remote_in_flight), &b)
                    and _number(kvgate_slot(e, self.o_pending), &self.pending[i])
                    and _number(kvgate_slot(e, self.o_remote_pending), &self.remote_pending[i])):
                return None
            self.count[i] = a + b  # integers below 2**53: exact, as Python's int sum
            m = kvgate_slot(e, self.o_metrics)
            w = 0.0
            if m == NULL:
                return None
            if <object>m is None:
                self.free_kv[i] = 0.0
                if self.need_kv:
                    return None  # unknown usage: the KV scorer fills it in (`fill_unknown`)
            else:
                if kvgate_type(m) != <void *>self.metrics_type:
                    return None
                if self.filtering and <object>kvgate_slot(m, self.o_waiting) is not None:
                    if not _number(kvgate_slot(m, self.o_waiting), &w):
                        return None
                if self.need_kv:
                    if not _number(kvgate_slot(m, self.o_kv), &a):
                        return None  # unknown (None) or not a number
                    a = 1.0 - a
                    if isnan(a) or a < 0.0 or a > 1.0:
                        return None  # out of range: the KV scorer clamps
                    self.free_kv[i] = a
            self.load[i] = self.count[i] + w
        self.n = n
        if not self.filtering or n == 0:
            return endpoints, self._ids(endpoints), False
        low = high = self.load[0]
        for i in range(n):
            if isnan(self.load[i]):
                return None
            if self.load[i] < low:
                low = self.load[i]
            if self.load[i] > high:
                high = self.load[i]
        if high - low <= self.abs_threshold:  # nobody can be a hot spot
            return endpoints, self._ids(endpoints), False
        above = low * self.rel_threshold
        cdef list kept = []
        j = 0
        for i in range(n):
            if not (self.load[i] - low > self.abs_threshold and self.load[i] > above):
                kept.append(<object>PyList_GET_ITEM(endpoints, i))
                self.count[j] = self.count[i]
                self.pending[j] = self.pending[i]
                self.remote_pending[j] = self.remote_pending[i]
                self.free_kv[j] = self.free_kv[i]
                j += 1
        self.n = j
        return kept, self._ids(kept), j != n

    cdef tuple _ids(self, list endpoints):
        cdef Py_ssize_t n = PyList_GET_SIZE(endpoints), i
        cdef tuple ids = PyTuple_New(n)
        cdef PyObject *item
        for i in range(n):
            item = kvgate_slot(PyList_GET_ITEM(endpoints, i), self.o_id)
            Py_INCREF(<object>item)
            PyTuple_SET_ITEM(ids, i, <object>item)
        return ids

    def columns(self, ids, depths, lines, fills, displaced, terms):
        """(columns, totals, ranked) for the candidates `gather` kept, `ids` theirs: the
        scorers' columns (clamped, in scorer order) and the weighted totals, as `Column`s,
        and the ids by total, best first, or None where totals tie within the tolerance
        (the picker shuffles those). `depths`: matched blocks per candidate (None: no
        hashes); `lines`: TTFT coefficients per candidate; `fills`: the index's fill per
        candidate; `displaced`: the eviction term's tokens per candidate (None: none);
        `terms(depth)`: (uncached tokens, cached share) of a depth. None where a plugin
        would take another branch (a NaN or non-positive estimate)."""
        cdef Py_ssize_t n = self.n, i, k, d
        cdef Py_ssize_t n_depths = 0
        cdef long long seen[MAX_DEPTHS]
        cdef double uncached[MAX_DEPTHS]
        cdef double share[MAX_DEPTHS]
        cdef long long depth
        cdef double u, s, x, best, low, high, span, kslope, w
        cdef bint any_displaced
        cdef PyObject *c
        cdef object item
        cdef list out = [], ranked
        cdef list depth_list = depths
        cdef list line_list = lines
        cdef list fill_list = fills
        cdef list displaced_list = displaced
        cdef int kind
        if len(ids) != n or any(
            x is not None and len(x) != n for x in (depths, lines, fills, displaced)
        ):  # the loops below index these lists unchecked
            raise ValueError("one id, depth, line, fill and displacement per kept candidate")
        for i in range(n):
            self.totals[i] = 0.0
        for k in range(self.n_scorers):
            kind = self.kinds[k]
            if kind == TTFT or kind == PREFIX:
                for i in range(n):
                    depth = 0 if depth_list is None else depth_list[i]
                    for d in range(n_depths):
                        if seen[d] == depth:
                            u, s = uncached[d], share[d]
                            break
                    else:
                        u, s = terms(depth)
                        if n_depths < MAX_DEPTHS:
                            seen[n_depths], uncached[n_depths], share[n_depths] = depth, u, s
                            n_depths += 1
                    if kind == PREFIX:
                        self.est[i] = s if depth_list is not None else 0.0
                        continue
                    c = PyList_GET_ITEM(line_list, i)
                    if kvgate_type(c) != <void *>self.line_type:
                        return None
                    if not (_number(kvgate_slot(c, self.o_overhead), &x)
                            and _number(kvgate_slot(c, self.o_slope), &s)):
                        return None
                    self.est[i] = x + s * ((u + self.pending[i]) + self.remote_pending[i])
                if kind == TTFT:
                    if displaced_list is not None:
                        any_displaced = False
                        for i in range(n):
                            if <double>displaced_list[i] != 0.0:  # NaN counts, as in any()
                                any_displaced = True
                                break
                        if any_displaced:
                            for i in range(n):
                                c = PyList_GET_ITEM(line_list, i)
                                _number(kvgate_slot(c, self.o_slope), &s)
                                kslope = self.eviction_weight * s
                                self.est[i] = self.est[i] + kslope * <double>displaced_list[i]
                    best = self.est[0] if n else 0.0
                    for i in range(n):
                        if isnan(self.est[i]):
                            return None
                        if self.est[i] < best:
                            best = self.est[i]
                    if not best > 0.0:
                        return None
                    for i in range(n):
                        self.est[i] = best / self.est[i]
            elif kind == IN_FLIGHT:
                low = high = self.count[0] if n else 0.0
                for i in range(n):
                    if self.count[i] < low:
                        low = self.count[i]
                    if self.count[i] > high:
                        high = self.count[i]
                span = high - low
                for i in range(n):
                    self.est[i] = 1.0 if span == 0.0 else (high - self.count[i]) / span
            elif kind == KV:
                for i in range(n):
                    self.est[i] = self.free_kv[i]
            else:  # HEADROOM: 1 − fill, clamped by the scheduler's rule
                for i in range(n):
                    if not _number(PyList_GET_ITEM(fill_list, i), &x):
                        return None
                    self.est[i] = _clamp(1.0 - x)
            w = self.weights[k]
            for i in range(n):
                x = self.est[i]
                self.totals[i] = self.totals[i] + (x if w == 1.0 else w * x)
            out.append(_column_of(self.est, n))
        for i in range(n):
            self.ranked[i].total = self.totals[i]
            self.ranked[i].index = i
        sort_ranked(self.ranked, self.ranked + n, n)
        if not distinct_totals(self.ranked, n, self.tie_tolerance):
            return out, _column_of(self.totals, n), None
        ranked = PyList_New(n)
        for i in range(n):
            item = ids[self.ranked[i].index]
            Py_INCREF(item)
            PyList_SET_ITEM(ranked, i, item)
        return out, _column_of(self.totals, n), ranked
