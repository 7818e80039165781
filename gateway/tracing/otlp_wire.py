"""Finished request traces as an OTLP `ExportTraceServiceRequest`, in protobuf wire format.

Written by hand because the SDK's encoder builds a message object per attribute and costs
~40 µs a span in Python; this one costs a few µs: attribute fields whose value repeats
(method, path, model, policy, backend, status) are cached as encoded bytes, and the rest are
a few concatenations. The field numbers are those of opentelemetry-proto's
`trace/v1/trace.proto`, `common/v1/common.proto` and `resource/v1/resource.proto`; the unit
tests decode the output with the official message classes.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Iterable, Mapping, Sequence
from urllib.parse import urlsplit

from gateway.tracing.context import SAMPLED
from gateway.tracing.spans import RequestTrace, UpstreamSpan
from routing.types import Decision, ScoreTable

AttrValue = str | bool | int | float | Sequence[str] | Sequence[float]

KIND_INTERNAL, KIND_SERVER, KIND_CLIENT = 1, 2, 3
STATUS_ERROR = 2
TOP_SCORES = 3  # backends named, with their totals, in the routing span
ROUTE_SPAN = "kvgate.route"
FIRST_TOKEN_EVENT = "first_token"
# Span.flags: bit 8 says whether the parent is known to be remote, bit 9 that it is.
_HAS_IS_REMOTE, _IS_REMOTE = 0x100, 0x200
_CACHE_LIMIT = 4096

_pack_double = struct.Struct("<d").pack
_pack_fixed64 = struct.Struct("<Q").pack
_pack_fixed32 = struct.Struct("<I").pack


def varint(n: int) -> bytes:
    """A protobuf varint (negative int64 values as their 64-bit two's complement)."""
    if 0 <= n < 0x80:
        return bytes((n,))
    if n < 0:
        n &= (1 << 64) - 1
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def field(tag: int, payload: bytes) -> bytes:
    """A length-delimited field: `tag` (field number << 3 | 2), its length, `payload`."""
    n = len(payload)
    if n < 0x80:
        return bytes((tag, n)) + payload
    return bytes((tag,)) + varint(n) + payload


def any_value(value: AttrValue) -> bytes:
    """An `AnyValue`: string 1, bool 2, int 3, double 4, array 5."""
    if isinstance(value, str):
        return field(0x0A, value.encode())
    if isinstance(value, bool):
        return b"\x10\x01" if value else b"\x10\x00"
    if isinstance(value, int):
        return b"\x18" + varint(value)
    if isinstance(value, float):
        return b"\x21" + _pack_double(value)
    values = b"".join(field(0x0A, any_value(v)) for v in value)
    return field(0x2A, values)


@functools.lru_cache(maxsize=256)
def _key(key: str) -> bytes:
    return field(0x0A, key.encode())


def key_value(key: str, value: AttrValue, tag: int = 0x4A) -> bytes:
    """One `KeyValue` as a field of tag `tag` (0x4A: `Span.attributes`)."""
    return field(tag, _key(key) + field(0x12, any_value(value)))


def int_attr(key: str, value: int) -> bytes:
    """`key_value` for an int, without the type tests."""
    av = bytes((0x18, value)) if 0 <= value < 0x80 else b"\x18" + varint(value)
    return field(0x4A, _key(key) + bytes((0x12, len(av))) + av)


def double_attr(key: str, value: float) -> bytes:
    """`key_value` for a float, without the type tests."""
    return field(0x4A, _key(key) + b"\x12\x09\x21" + _pack_double(value))


def doubles_attr(key: str, values: Sequence[float]) -> bytes:
    """`key_value` for an array of floats, without the type tests."""
    array = field(0x2A, b"".join(b"\x0a\x09\x21" + _pack_double(v) for v in values))
    return field(0x4A, _key(key) + field(0x12, array))


class _Repeated:
    """Encoded attribute fields for sets of values that repeat from request to request:
    `get(keys, values)` is one dict look-up once a combination has been seen."""

    def __init__(self) -> None:
        self._cache: dict[tuple[object, ...], bytes] = {}

    def get(self, keys: tuple[str, ...], values: tuple[object, ...]) -> bytes:
        # The keys' tuple is a constant of the caller (its identity tells the spans apart);
        # each position always holds one type (True == 1 would collide otherwise).
        k = (id(keys), *values)
        out = self._cache.get(k)
        if out is None:
            if len(self._cache) >= _CACHE_LIMIT:
                self._cache.clear()
            out = b"".join(
                key_value(key, v)  # type: ignore[arg-type]
                for key, v in zip(keys, values, strict=True)
                if v is not None
            )
            self._cache[k] = out
        return out


@functools.lru_cache(maxsize=1024)
def _address(url: str) -> tuple[str, int | None]:
    parts = urlsplit(url)
    port = parts.port or {"http": 80, "https": 443}.get(parts.scheme)
    return parts.hostname or "", port


class SpanEncoder:
    """Encodes batches of `RequestTrace`s under one resource and instrumentation scope."""

    def __init__(self, resource: Mapping[str, AttrValue], scope: str, version: str) -> None:
        attrs = b"".join(key_value(k, v, tag=0x0A) for k, v in resource.items())
        self._resource = field(0x0A, attrs)  # ResourceSpans.resource
        self._scope = field(0x0A, field(0x0A, scope.encode()) + field(0x12, version.encode()))
        self._attr = _Repeated()
        self._names: dict[tuple[str, int], bytes] = {}

    def encode(self, traces: Iterable[RequestTrace]) -> tuple[bytes, int]:
        """The request's bytes and how many spans they hold."""
        spans: list[bytes] = []
        for t in traces:
            self._request(t, spans)
        scope_spans = field(0x12, self._scope + b"".join(spans))
        return field(0x0A, self._resource + scope_spans), len(spans)

    def _request(self, t: RequestTrace, out: list[bytes]) -> None:
        flags = SAMPLED if t.sampled else 0
        parent = t.parent
        trace_id = b"\x0a\x10" + t.trace_id.to_bytes(16, "big")
        server_id = t.server_id.to_bytes(8, "big")
        # After each child span's id: the trace state, and the server span as its parent.
        child_tail = b"\x22\x08" + server_id
        server_flags = flags | _HAS_IS_REMOTE
        server_tail = b""
        if parent is not None:
            server_flags |= _IS_REMOTE
            server_tail = b"\x22\x08" + parent.span_id.to_bytes(8, "big")
            if parent.state:
                state = field(0x1A, parent.state.encode("latin-1"))
                child_tail, server_tail = state + child_tail, state + server_tail
        local = _pack_flags(_FLAGS_TAG, flags | _HAS_IS_REMOTE)
        out.append(
            _span(
                trace_id, b"\x12\x08", server_id, server_tail, self._name(t.name, KIND_SERVER),
                _pack_times(0x39, t.start_ns, 0x41, t.end_ns), self._server_attrs(t),
                self._first_token(t), _server_status(t), _pack_flags(_FLAGS_TAG, server_flags),
            )
        )  # fmt: skip
        if t.decision is not None and t.route_id:
            out.append(
                _span(
                    trace_id, b"\x12\x08", t.route_id.to_bytes(8, "big"), child_tail,
                    self._name(ROUTE_SPAN, KIND_INTERNAL),
                    _pack_times(0x39, t.route_start_ns, 0x41, t.route_end_ns),
                    self._route_attrs(t, t.decision), local,
                )
            )  # fmt: skip
        for u in t.upstreams or ():
            attrs, status = self._upstream_attrs(t, u)
            out.append(
                _span(
                    trace_id, b"\x12\x08", u.span_id.to_bytes(8, "big"), child_tail,
                    self._name(t.name, KIND_CLIENT),
                    _pack_times(0x39, u.start_ns, 0x41, u.end_ns), attrs, status, local,
                )
            )  # fmt: skip

    def _name(self, name: str, kind: int) -> bytes:
        """The `name` and `kind` fields."""
        out = self._names.get((name, kind))
        if out is None:
            if len(self._names) >= _CACHE_LIMIT:
                self._names.clear()
            out = self._names[name, kind] = field(0x2A, name.encode()) + bytes((0x30, kind))
        return out

    def _server_attrs(self, t: RequestTrace) -> bytes:
        o = t.outcome
        if o is None:
            return self._attr.get(_SERVER_KEYS[:2], (t.method, t.path))
        error = str(o.status) if o.status >= 500 else None
        values = (t.method, t.path, o.status, o.model, o.stream, o.client, error)
        parts = [self._attr.get(_SERVER_KEYS, values)]
        if o.request_id is not None:
            parts.append(key_value("kvgate.request_id", o.request_id))
        if o.ttft_s is not None:
            parts.append(double_attr("kvgate.ttft_s", o.ttft_s))
        if (u := o.usage) is not None:
            if u.prompt_tokens is not None:
                parts.append(int_attr("gen_ai.usage.input_tokens", u.prompt_tokens))
            if u.completion_tokens is not None:
                parts.append(int_attr("gen_ai.usage.output_tokens", u.completion_tokens))
            if u.cached_tokens is not None:
                parts.append(int_attr("gen_ai.usage.cache_read.input_tokens", u.cached_tokens))
        return b"".join(parts)

    def _first_token(self, t: RequestTrace) -> bytes:
        """The `first_token` event, at TTFT after the server span's start."""
        o = t.outcome
        if o is None or o.ttft_s is None:
            return b""
        at = t.start_ns + int(o.ttft_s * 1e9)
        return _FIRST_TOKEN_HEAD + _pack_fixed64(at) + _FIRST_TOKEN_NAME

    def _route_attrs(self, t: RequestTrace, d: Decision) -> bytes:
        top, scores = _top_scores(d)
        values = (d.profile, d.target, len(d.scores), len(d.filtered_out) or None, top or None)
        parts = [
            self._attr.get(_ROUTE_KEYS, values),
            int_attr("kvgate.prefix.blocks", t.prefix_blocks),
        ]
        if t.matched_blocks is not None:
            parts.append(int_attr("kvgate.prefix.matched_blocks", t.matched_blocks))
        if scores:
            parts.append(doubles_attr("kvgate.route.top_scores", scores))
        return b"".join(parts)

    def _upstream_attrs(self, t: RequestTrace, u: UpstreamSpan) -> tuple[bytes, bytes]:
        host, port = _address(u.url)
        failed = u.error is not None or u.status >= 400
        error = (str(u.status) if u.status else "upstream_error") if failed else None
        values = (t.method, host, port, u.backend, u.attempt, u.status or None, error)
        status = _status(u.error or "") if failed else b""
        return self._attr.get(_UPSTREAM_KEYS, values), status


_SERVER_KEYS = (
    "http.request.method", "url.path", "http.response.status_code", "gen_ai.request.model",
    "kvgate.stream", "client.address", "error.type",
)  # fmt: skip
_ROUTE_KEYS = ("kvgate.policy", "kvgate.backend", "kvgate.route.candidates",
               "kvgate.route.filtered_out", "kvgate.route.top_backends")  # fmt: skip
_UPSTREAM_KEYS = (
    "http.request.method", "server.address", "server.port", "kvgate.backend",
    "kvgate.attempt", "http.response.status_code", "error.type",
)  # fmt: skip
_FIRST_TOKEN_NAME = field(0x12, FIRST_TOKEN_EVENT.encode())
_FIRST_TOKEN_HEAD = bytes((0x5A, 9 + len(_FIRST_TOKEN_NAME), 0x09))  # Span.events, time
_FLAGS_TAG = 0x0185  # Span.flags (field 16, fixed32): its tag as a little-endian varint
_pack_times = struct.Struct("<BQBQ").pack  # start and end, fields 7 and 8, fixed64
_pack_flags = struct.Struct("<HI").pack


def _top_scores(d: Decision) -> tuple[tuple[str, ...], list[float]]:
    """The first `TOP_SCORES` backends of the ranking, and their total scores."""
    s = d.scores
    ranked = d.ranked[:TOP_SCORES]
    if isinstance(s, ScoreTable):
        ids, totals = s.ids, s.totals
        at = {eid: i for i, eid in enumerate(ids)}
        top = tuple(i for i in ranked if i in at)
        return top, [totals[at[i]] for i in top]
    by_id = {e.endpoint_id: e.total for e in s}
    top = tuple(i for i in ranked if i in by_id)
    return top, [by_id[i] for i in top]


def _span(*fields: bytes) -> bytes:
    """A `ScopeSpans.spans` field from the span's encoded fields."""
    return field(0x12, b"".join(fields))


def _status(message: str) -> bytes:
    """`Span.status` = ERROR with `message`."""
    body = (field(0x12, message.encode()) if message else b"") + bytes((0x18, STATUS_ERROR))
    return field(0x7A, body)


def _server_status(t: RequestTrace) -> bytes:
    o = t.outcome
    if o is None or o.status < 500:  # a 4xx is the client's error, not the server span's
        return b""
    return _status(o.error or "")
