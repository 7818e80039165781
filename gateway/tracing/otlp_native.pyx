# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The request path's tracing compiled: `spans.Tracer`, `RequestTrace` and `UpstreamSpan`
(`NativeTracer`, `NativeTrace`, `NativeUpstream`: the same fields and methods, C fields and
the C clock), and `otlp_wire.SpanEncoder.request`: a finished request's spans written from
its `NativeTrace` and `Outcome` straight into one C buffer, then copied out as one `bytes`.
The encoder reads the trace's C fields, not Python attributes; a pure-Python `RequestTrace`
is copied into a `NativeTrace` first (tests, and the reference tracer's traces).

The pure-Python `SpanEncoder` is the reference: this writes the same bytes, field for field
(`tests/unit/gateway/tracing/test_otlp_native.py` compares them), without the flattened
`FinishedTrace`, a `bytes` per field or the caches of encoded attribute sets: an attribute
is its key's bytes (encoded once) and its value copied in. Keys and constants come from
`otlp_wire`. A nested message is written in place after a one-byte length, and moved on by
a byte in the rare case that its length needs two (128 bytes or more).

Not thread-safe (one buffer): the tracer calls it from the event loop only.
"""

cimport cython
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from libc.stdint cimport int64_t, uint8_t, uint64_t
from libc.stdlib cimport free, malloc, realloc
from libc.string cimport memcpy, memmove

from gateway.tracing.context import SAMPLED, parse_traceparent
from gateway.tracing.sampling import LOW_64, Bounds
from gateway.tracing.otlp_wire import (
    CACHED_TOKENS, FIRST_TOKEN_EVENT, INPUT_TOKENS, KIND_CLIENT, KIND_INTERNAL, KIND_SERVER,
    MATCHED_BLOCKS, OUTPUT_TOKENS, PREFIX_BLOCKS, REQUEST_ID, ROUTE_KEYS, ROUTE_SPAN,
    SERVER_KEYS, STATUS_ERROR, TOP_SCORES_KEY, TTFT, UPSTREAM_KEYS, SpanEncoder, field,
    key_value, varint, _address, _key,
)
from gateway.tracing.spans import TOP_SCORES
from routing.types import ScoreTable

cdef extern from "Python.h":
    const char* PyUnicode_AsUTF8AndSize(object, Py_ssize_t*) except NULL

cdef extern from "<time.h>" nogil:
    ctypedef long time_t
    cdef struct timespec:
        time_t tv_sec
        long tv_nsec
    int clock_gettime(int clk_id, timespec* tp)
    int CLOCK_REALTIME


cdef inline int64_t _now() noexcept nogil:
    """`time.time_ns()` (the same clock: CLOCK_REALTIME)."""
    cdef timespec ts
    clock_gettime(CLOCK_REALTIME, &ts)
    return <int64_t>ts.tv_sec * 1000000000 + ts.tv_nsec


# -- the request path ------------------------------------------------------------------------


@cython.no_gc  # holds no object that could lead back to it: the collector need not track it
cdef class NativeUpstream:
    """`spans.UpstreamSpan` compiled: one attempt to send the request to a backend."""

    cdef public uint64_t span_id
    cdef public str backend, url
    cdef public int attempt
    cdef public int64_t start_ns, end_ns
    cdef public int status  # the backend's answer; 0: none (an error instead)
    cdef public object error  # str | None

    def __init__(self, uint64_t span_id, str backend, str url, int attempt, int64_t start_ns,
                 int64_t end_ns=0, int status=0, error=None):
        self.span_id, self.backend, self.url, self.attempt = span_id, backend, url, attempt
        self.start_ns, self.end_ns, self.status, self.error = start_ns, end_ns, status, error


@cython.no_gc  # nor does a trace (its decision, parent, upstreams and ids never name it)
cdef class NativeTrace:
    """`spans.RequestTrace` compiled: one request's spans (same fields, same methods)."""

    cdef public str name, method, path
    cdef public object trace_id  # 128 bits
    cdef public uint64_t server_id
    cdef public bint sampled
    cdef public object parent  # RemoteParent | None
    cdef public int64_t start_ns, end_ns
    cdef public uint64_t route_id
    cdef public int64_t route_start_ns, route_end_ns
    cdef public object decision  # Decision | None
    cdef public object prefix_blocks  # int
    cdef public object matched_blocks  # int | None
    cdef public object backend  # str | None
    cdef public list upstreams  # of NativeUpstream, or None
    cdef public object _ids  # random.Random | None

    def __init__(self, str name, str method, str path, trace_id, uint64_t server_id,
                 bint sampled, parent, int64_t start_ns, int64_t end_ns=0,
                 uint64_t route_id=0, int64_t route_start_ns=0, int64_t route_end_ns=0,
                 decision=None, prefix_blocks=0, matched_blocks=None, backend=None,
                 list upstreams=None, _ids=None):
        self.name, self.method, self.path = name, method, path
        self.trace_id, self.server_id, self.sampled = trace_id, server_id, sampled
        self.parent, self.start_ns, self.end_ns = parent, start_ns, end_ns
        self.route_id, self.route_start_ns, self.route_end_ns = (
            route_id, route_start_ns, route_end_ns
        )
        self.decision, self.prefix_blocks, self.matched_blocks = (
            decision, prefix_blocks, matched_blocks
        )
        self.backend, self.upstreams, self._ids = backend, upstreams, _ids

    def route_started(self):
        self.route_start_ns = _now()

    def routed(self, decision, prefix_blocks):
        """The routing span ends with this decision."""
        self.route_end_ns = _now()
        self.route_id = self._new_id()
        self.decision, self.prefix_blocks = decision, prefix_blocks

    def upstream(self, str backend, str url, int attempt):
        cdef NativeUpstream span = NativeUpstream.__new__(NativeUpstream)
        span.span_id, span.backend, span.url, span.attempt = self._new_id(), backend, url, attempt
        span.start_ns = _now()
        if self.upstreams is None:
            self.upstreams = [span]
        else:
            self.upstreams.append(span)
        return span

    def propagation(self, uint64_t parent_id):
        """`traceparent` (and the caller's `tracestate`) naming span `parent_id` as the
        parent, for the engine."""
        out = [(b"traceparent", _traceparent(self.trace_id, parent_id, self.sampled))]
        parent = self.parent
        if parent is not None and parent.state:
            out.append((b"tracestate", parent.state.encode("latin-1")))
        return out

    cdef uint64_t _new_id(self) except? 0:
        cdef uint64_t n = self._ids.getrandbits(64)
        return n or 1


cdef bytes _traceparent(trace_id, uint64_t span_id, bint sampled):
    """`context.traceparent`, written in C."""
    cdef char out[55]
    cdef uint64_t hi = trace_id >> 64, lo = trace_id & LOW_64
    memcpy(out, b"00-", 3)
    _hex64(out + 3, hi)
    _hex64(out + 19, lo)
    out[35] = 45  # -
    _hex64(out + 36, span_id)
    memcpy(out + 52, b"-01" if sampled else b"-00", 3)
    return PyBytes_FromStringAndSize(out, 55)


cdef const char* HEX = b"0123456789abcdef"


cdef inline void _hex64(char* out, uint64_t n) noexcept:
    cdef int i
    for i in range(15, -1, -1):
        out[i] = HEX[n & 0xF]
        n >>= 4


cdef class NativeTracer:
    """`spans.Tracer` compiled: starts `NativeTrace`s and finishes them."""

    cdef object _bounds, _root, _sample, _sink, _ids

    def __init__(self, sample, sink, ids=None):
        self._bounds = sample if isinstance(sample, Bounds) else None
        self._root = sample.root if isinstance(sample, Bounds) else None
        self._sample = None if isinstance(sample, Bounds) else sample
        self._sink = sink
        if ids is None:
            import random
            ids = random.Random()
        self._ids = ids

    def start(self, str method, str path, parent_header, state_header):
        """The server span of a request whose headers carry `traceparent`/`tracestate`."""
        cdef NativeTrace t = NativeTrace.__new__(NativeTrace)
        parent = parse_traceparent(parent_header, state_header) if parent_header else None
        ids = self._ids
        trace_id = parent.trace_id if parent is not None else ids.getrandbits(128) or 1
        name = method + " " + path
        if self._bounds is None:
            sampled = self._sample(trace_id, parent, name)
        elif parent is None:
            sampled = trace_id & LOW_64 < self._root
        else:
            sampled = self._bounds.sampled(trace_id, parent)
        cdef uint64_t server_id = ids.getrandbits(64)
        t.name, t.method, t.path, t.trace_id = name, method, path, trace_id
        t.server_id, t.sampled, t.parent = server_id or 1, sampled, parent
        t.prefix_blocks, t._ids = 0, ids
        t.start_ns = _now()
        return t

    def finish(self, NativeTrace trace, outcome):
        """The server span ends: queued for export when sampled."""
        trace.end_ns = _now()
        trace._ids = None
        if trace.sampled:
            self._sink(trace, outcome)


cdef NativeTrace _native(trace):
    """A pure-Python `RequestTrace` copied into a `NativeTrace`."""
    if type(trace) is NativeTrace:
        return trace
    upstreams = None
    if trace.upstreams is not None:
        upstreams = [
            a if type(a) is NativeUpstream else NativeUpstream(
                a.span_id, a.backend, a.url, a.attempt, a.start_ns, a.end_ns, a.status, a.error)
            for a in trace.upstreams
        ]
    return NativeTrace(
        trace.name, trace.method, trace.path, trace.trace_id, trace.server_id, trace.sampled,
        trace.parent, trace.start_ns, trace.end_ns, trace.route_id, trace.route_start_ns,
        trace.route_end_ns, trace.decision, trace.prefix_blocks, trace.matched_blocks,
        trace.backend, upstreams,
    )

cdef enum:
    HAS_IS_REMOTE = 0x100  # Span.flags: the parent is known to be remote, or not
    IS_REMOTE = 0x200
    CACHE_LIMIT = 4096
    MAX_TOP = 16  # room for the top scores

assert TOP_SCORES <= MAX_TOP


cdef class NativeSpanEncoder:
    """`SpanEncoder` with `request` compiled (same constructor, same `batch`)."""

    cdef char* _buf
    cdef Py_ssize_t _len, _cap
    cdef object _reference
    cdef readonly object batch
    cdef list _server_keys, _route_keys, _upstream_keys
    cdef bytes _k_request_id, _k_ttft, _k_input, _k_output, _k_cached
    cdef bytes _k_blocks, _k_matched, _k_top_scores
    cdef bytes _route_name, _first_token_name
    cdef dict _addresses  # url: its server.address and server.port attributes

    def __cinit__(self, *args, **kwargs):
        self._cap = 4096
        self._buf = <char*>malloc(self._cap)
        if self._buf == NULL:
            raise MemoryError()

    def __dealloc__(self):
        free(self._buf)

    def __init__(self, resource, scope, version):
        self._reference = SpanEncoder(resource, scope, version)
        self.batch = self._reference.batch
        self._server_keys = [_key(k) for k in SERVER_KEYS]
        self._route_keys = [_key(k) for k in ROUTE_KEYS]
        self._upstream_keys = [_key(k) for k in UPSTREAM_KEYS]
        self._k_request_id, self._k_ttft = _key(REQUEST_ID), _key(TTFT)
        self._k_input, self._k_output = _key(INPUT_TOKENS), _key(OUTPUT_TOKENS)
        self._k_cached, self._k_blocks = _key(CACHED_TOKENS), _key(PREFIX_BLOCKS)
        self._k_matched, self._k_top_scores = _key(MATCHED_BLOCKS), _key(TOP_SCORES_KEY)
        self._route_name = field(0x2A, ROUTE_SPAN.encode()) + bytes((0x30, KIND_INTERNAL))
        self._first_token_name = field(0x12, FIRST_TOKEN_EVENT.encode())
        self._addresses = {}

    # -- the buffer ----------------------------------------------------------------------

    cdef int _grow(self, Py_ssize_t n) except -1:
        cdef Py_ssize_t cap = self._cap
        while cap < self._len + n:
            cap *= 2
        cdef char* buf = <char*>realloc(self._buf, cap)
        if buf == NULL:
            raise MemoryError()
        self._buf, self._cap = buf, cap
        return 0

    cdef inline int _put(self, const char* data, Py_ssize_t n) except -1:
        if self._len + n > self._cap:
            self._grow(n)
        memcpy(self._buf + self._len, data, n)
        self._len += n
        return 0

    cdef inline int _bytes(self, bytes data) except -1:
        return self._put(PyBytes_AS_STRING(data), PyBytes_GET_SIZE(data))

    cdef inline int _byte(self, uint8_t b) except -1:
        if self._len + 1 > self._cap:
            self._grow(1)
        self._buf[self._len] = <char>b
        self._len += 1
        return 0

    cdef inline int _varint(self, uint64_t n) except -1:
        if self._len + 10 > self._cap:
            self._grow(10)
        while n >= 0x80:
            self._buf[self._len] = <char>((n & 0x7F) | 0x80)
            self._len += 1
            n >>= 7
        self._buf[self._len] = <char>n
        self._len += 1
        return 0

    cdef inline int _fixed64(self, uint8_t tag, uint64_t n) except -1:
        """`tag`, then `n` little-endian (fixed64, double)."""
        cdef int i
        if self._len + 9 > self._cap:
            self._grow(9)
        self._buf[self._len] = <char>tag
        for i in range(8):
            self._buf[self._len + 1 + i] = <char>((n >> (8 * i)) & 0xFF)
        self._len += 9
        return 0

    cdef inline int _id(self, uint8_t tag, uint64_t n) except -1:
        """A span id field: `tag`, length 8, `n` big-endian."""
        cdef int i
        if self._len + 10 > self._cap:
            self._grow(10)
        self._buf[self._len] = <char>tag
        self._buf[self._len + 1] = 8
        for i in range(8):
            self._buf[self._len + 2 + i] = <char>((n >> (8 * (7 - i))) & 0xFF)
        self._len += 10
        return 0

    cdef inline Py_ssize_t _open(self, uint8_t tag) except -1:
        """Starts a length-delimited field; `_close` with what this returns ends it."""
        self._byte(tag)
        self._byte(0)
        return self._len

    cdef int _close(self, Py_ssize_t start) except -1:
        cdef Py_ssize_t n = self._len - start, size = 1, m
        if n < 0x80:
            self._buf[start - 1] = <char>n
            return 0
        m = n
        while m >= 0x80:
            size += 1
            m >>= 7
        if self._len + size - 1 > self._cap:
            self._grow(size - 1)
        memmove(self._buf + start + size - 1, self._buf + start, n)
        self._len = start - 1
        self._varint(<uint64_t>n)
        self._len += n
        return 0

    # -- values --------------------------------------------------------------------------

    cdef int _string(self, uint8_t tag, str s) except -1:
        cdef Py_ssize_t n
        cdef const char* data = PyUnicode_AsUTF8AndSize(s, &n)
        self._byte(tag)
        self._varint(<uint64_t>n)
        return self._put(data, n)

    cdef int _int(self, object value) except -1:
        """An int64 varint (negative: two's complement), as `otlp_wire.varint`."""
        cdef int64_t n
        try:
            n = value
        except OverflowError:  # beyond int64: the reference's bytes, whatever they are
            return self._bytes(varint(value))
        return self._varint(<uint64_t>n)

    cdef int _double(self, double value) except -1:
        cdef uint64_t bits
        memcpy(&bits, &value, 8)
        return self._fixed64(0x21, bits)

    cdef int _any(self, object value) except -1:
        """An `AnyValue`, as `otlp_wire.any_value`."""
        cdef Py_ssize_t start, item
        if isinstance(value, str):
            return self._string(0x0A, value)
        if isinstance(value, bool):
            self._byte(0x10)
            return self._byte(1 if value else 0)
        if isinstance(value, int):
            self._byte(0x18)
            return self._int(value)
        if isinstance(value, float):
            return self._double(value)
        start = self._open(0x2A)
        for v in value:
            item = self._open(0x0A)
            self._any(v)
            self._close(item)
        return self._close(start)

    cdef int _attr(self, bytes key, object value) except -1:
        """A `Span.attributes` field, as `otlp_wire.key_value`."""
        cdef Py_ssize_t kv = self._open(0x4A), av
        self._bytes(key)
        av = self._open(0x12)
        self._any(value)
        self._close(av)
        return self._close(kv)

    cdef int _int_attr(self, bytes key, object value) except -1:
        cdef Py_ssize_t kv = self._open(0x4A), av
        self._bytes(key)
        av = self._open(0x12)
        self._byte(0x18)
        self._int(value)
        self._close(av)
        return self._close(kv)

    cdef int _double_attr(self, bytes key, double value) except -1:
        cdef Py_ssize_t kv = self._open(0x4A)
        self._bytes(key)
        self._byte(0x12)
        self._byte(9)
        self._double(value)
        return self._close(kv)

    cdef int _attrs(self, list keys, tuple values) except -1:
        """The attributes of `keys` whose values are not None (`otlp_wire._Repeated`)."""
        cdef Py_ssize_t i
        for i in range(len(values)):
            if values[i] is not None:
                self._attr(keys[i], values[i])
        return 0

    cdef int _name(self, str name, uint8_t kind) except -1:
        self._string(0x2A, name)
        self._byte(0x30)
        return self._byte(kind)

    cdef int _times(self, uint64_t start_ns, uint64_t end_ns) except -1:
        self._fixed64(0x39, start_ns)
        return self._fixed64(0x41, end_ns)

    cdef int _flags(self, uint64_t flags) except -1:
        cdef int i
        self._byte(0x85)
        self._byte(0x01)
        for i in range(4):
            self._byte((flags >> (8 * i)) & 0xFF)
        return 0

    cdef int _status(self, str message) except -1:
        cdef Py_ssize_t start = self._open(0x7A)
        if message:
            self._string(0x12, message)
        self._byte(0x18)
        self._byte(STATUS_ERROR)
        return self._close(start)

    # -- spans ---------------------------------------------------------------------------

    def request(self, trace_, outcome):
        """`SpanEncoder.request(trace, outcome)`: the spans' bytes, and how many."""
        cdef NativeTrace trace = _native(trace_)
        cdef NativeUpstream a
        cdef uint64_t flags = SAMPLED if trace.sampled else 0
        cdef uint64_t server_id = trace.server_id, parent_id = 0, start_ns = trace.start_ns
        cdef bytes trace_id = b"\x0a\x10" + trace.trace_id.to_bytes(16, "big")
        cdef bytes state = None
        cdef Py_ssize_t span
        cdef int count = 1
        self._len = 0
        parent = trace.parent
        if parent is not None:
            parent_id = parent.span_id
            if parent.state:
                state = field(0x1A, parent.state.encode("latin-1"))
        name = trace.name
        d = trace.decision

        span = self._open(0x12)  # the server span
        self._bytes(trace_id)
        self._id(0x12, server_id)
        if state is not None:
            self._bytes(state)
        if parent_id:
            self._id(0x22, parent_id)
        self._name(name, KIND_SERVER)
        self._times(start_ns, trace.end_ns)
        self._server_attrs(trace, outcome)
        ttft = outcome.ttft_s
        if ttft is not None:  # the first_token event
            self._byte(0x5A)
            self._byte(9 + PyBytes_GET_SIZE(self._first_token_name))
            self._fixed64(0x09, start_ns + <int64_t>(<double>ttft * 1e9))
            self._bytes(self._first_token_name)
        if outcome.status >= 500:  # a 4xx is the client's error, not the server span's
            self._status(outcome.error or "")
        self._flags(flags | HAS_IS_REMOTE | (IS_REMOTE if parent_id else 0))
        self._close(span)

        if d is not None:
            span = self._open(0x12)
            self._child(trace_id, trace.route_id, state, server_id)
            self._bytes(self._route_name)
            self._times(trace.route_start_ns, trace.route_end_ns)
            self._route_attrs(trace, d)
            self._flags(flags | HAS_IS_REMOTE)
            self._close(span)
            count += 1

        upstreams = trace.upstreams
        if upstreams:
            for a in upstreams:
                self._upstream(trace, a, trace_id, state, server_id, flags)
                count += 1
        return PyBytes_FromStringAndSize(self._buf, self._len), count

    cdef int _child(self, bytes trace_id, uint64_t span_id, bytes state, uint64_t parent) except -1:
        """A child span's ids: trace, its own, the trace state, the server span as parent."""
        self._bytes(trace_id)
        self._id(0x12, span_id)
        if state is not None:
            self._bytes(state)
        return self._id(0x22, parent)

    cdef int _server_attrs(self, NativeTrace trace, outcome) except -1:
        cdef int status = outcome.status
        usage = outcome.usage
        self._attrs(self._server_keys, (
            trace.method, trace.path, outcome.status, outcome.model, outcome.stream,
            trace.backend, outcome.client, str(status) if status >= 500 else None,
        ))
        if outcome.request_id is not None:
            self._attr(self._k_request_id, outcome.request_id)
        if outcome.ttft_s is not None:
            self._double_attr(self._k_ttft, outcome.ttft_s)
        if usage is not None:
            if usage.prompt_tokens is not None:
                self._int_attr(self._k_input, usage.prompt_tokens)
            if usage.completion_tokens is not None:
                self._int_attr(self._k_output, usage.completion_tokens)
            if usage.cached_tokens is not None:
                self._int_attr(self._k_cached, usage.cached_tokens)
        return 0

    cdef int _route_attrs(self, NativeTrace trace, d) except -1:
        cdef double scores[MAX_TOP]
        cdef Py_ssize_t start, item, i
        top = _top(d, scores)
        filtered = len(d.filtered_out)
        ranked, scored = d.ranked, d.scores
        self._attrs(self._route_keys, (
            d.profile,
            ranked[0] if ranked else None,  # d.target, without a Python call
            len(scored.ids) if type(scored) is ScoreTable else len(scored),
            filtered or None,
            top or None,
        ))
        self._int_attr(self._k_blocks, trace.prefix_blocks)
        if trace.matched_blocks is not None:
            self._int_attr(self._k_matched, trace.matched_blocks)
        if top:
            start = self._open(0x4A)
            self._bytes(self._k_top_scores)
            item = self._open(0x12)
            array = self._open(0x2A)
            for i in range(len(top)):
                self._byte(0x0A)
                self._byte(9)
                self._double(scores[i])
            self._close(array)
            self._close(item)
            self._close(start)
        return 0

    cdef int _upstream(self, NativeTrace trace, NativeUpstream a, bytes trace_id, bytes state,
                       uint64_t server_id, uint64_t flags) except -1:
        cdef int status = a.status
        error = a.error
        cdef bint failed = error is not None or status >= 400
        cdef Py_ssize_t span = self._open(0x12)
        self._child(trace_id, a.span_id, state, server_id)
        self._name(trace.name, KIND_CLIENT)
        self._times(a.start_ns, a.end_ns)
        keys = self._upstream_keys
        self._attr(keys[0], trace.method)
        self._bytes(self._address(a.url))
        if a.backend is not None:
            self._attr(keys[3], a.backend)
        self._attr(keys[4], a.attempt)
        if status:
            self._attr(keys[5], status)
        if failed:
            self._attr(keys[6], str(status) if status else "upstream_error")
            self._status(error or "")
        self._flags(flags | HAS_IS_REMOTE)
        return self._close(span)

    cdef bytes _address(self, str url):
        """The server.address and server.port attributes of `url`, encoded once."""
        out = self._addresses.get(url)
        if out is None:
            if len(self._addresses) >= CACHE_LIMIT:
                self._addresses.clear()
            host, port = _address(url)
            out = key_value(UPSTREAM_KEYS[1], host)
            if port is not None:
                out += key_value(UPSTREAM_KEYS[2], port)
            self._addresses[url] = out
        return out


cdef list _top(d, double* scores):
    """`spans.top_scores(d)`: the first `TOP_SCORES` ranked backends that were scored (a
    list), their totals in `scores`. An id scored twice: its last total, as the reference's
    dict keeps."""
    cdef Py_ssize_t i, j, n
    cdef list top = []
    s = d.scores
    ranked = d.ranked
    table = type(s) is ScoreTable or isinstance(s, ScoreTable)  # an ABC: slow to ask
    ids = s.ids if table else None
    n = len(ids) if table else len(s)
    for i in range(min(len(ranked), TOP_SCORES)):
        eid = ranked[i]
        for j in range(n - 1, -1, -1):
            if table:
                if ids[j] == eid:
                    scores[len(top)] = s.totals[j]
                    top.append(eid)
                    break
            else:
                e = s[j]
                if e.endpoint_id == eid:
                    scores[len(top)] = e.total
                    top.append(eid)
                    break
    return top
