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
from gateway.tracing.spans import FinishedTrace, Outcome, RequestTrace, finished

AttrValue = str | bool | int | float | Sequence[str] | Sequence[float]

KIND_INTERNAL, KIND_SERVER, KIND_CLIENT = 1, 2, 3
STATUS_ERROR = 2
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
    array = b""
    for v in values:
        array += b"\x0a\x09\x21" + _pack_double(v)
    array = field(0x2A, array)
    return field(0x4A, _key(key) + field(0x12, array))


class _Repeated:
    """Encoded attribute fields for sets of values that repeat from request to request:
    `get(values)` is one dict look-up once a combination has been seen."""

    def __init__(self, keys: tuple[str, ...]) -> None:
        self._keys = keys
        # Each position always holds one type (True == 1 would collide otherwise).
        self._cache: dict[tuple[object, ...], bytes] = {}

    def get(self, values: tuple[object, ...]) -> bytes:
        out = self._cache.get(values)
        if out is None:
            if len(self._cache) >= _CACHE_LIMIT:
                self._cache.clear()
            out = b"".join(
                key_value(key, v)  # type: ignore[arg-type]
                for key, v in zip(self._keys, values, strict=True)
                if v is not None
            )
            self._cache[values] = out
        return out


@functools.lru_cache(maxsize=1024)
def _address(url: str) -> tuple[str, int | None]:
    parts = urlsplit(url)
    port = parts.port or {"http": 80, "https": 443}.get(parts.scheme)
    return parts.hostname or "", port


class SpanEncoder:
    """Encodes `FinishedTrace`s under one resource and instrumentation scope. Written to
    allocate few objects the garbage collector tracks (bytes are not; lists and tuples
    are): at 500 requests/s the collections they cause cost more than the encoding."""

    def __init__(self, resource: Mapping[str, AttrValue], scope: str, version: str) -> None:
        attrs = b"".join(key_value(k, v, tag=0x0A) for k, v in resource.items())
        self._resource = field(0x0A, attrs)  # ResourceSpans.resource
        self._scope = field(0x0A, field(0x0A, scope.encode()) + field(0x12, version.encode()))
        self._server = _Repeated(SERVER_KEYS)
        self._route = _Repeated(ROUTE_KEYS)
        self._upstream = _Repeated(UPSTREAM_KEYS)
        self._names: dict[str, bytes] = {}

    def request(self, trace: RequestTrace, outcome: Outcome) -> tuple[bytes, int]:
        """A finished request's spans, encoded, and how many (what the export queue holds;
        `otlp_native.NativeSpanEncoder.request` writes the same bytes)."""
        return self.spans(finished(trace, outcome))

    def encode(self, traces: Iterable[FinishedTrace]) -> tuple[bytes, int]:
        """An export request of `traces`, and how many spans it holds."""
        chunks = [self.spans(t) for t in traces]
        return self.batch(c for c, _ in chunks), sum(n for _, n in chunks)

    def batch(self, spans: Iterable[bytes]) -> bytes:
        """An `ExportTraceServiceRequest` of requests' encoded spans: one join, the lengths
        computed first (a batch is ~1 KB a request; each copy of it costs)."""
        parts = [b"", self._resource, b"", self._scope, *spans]
        scope_len = sum(map(len, parts)) - len(self._resource)
        parts[2] = bytes((0x12,)) + varint(scope_len)  # ScopeSpans, in ResourceSpans
        parts[0] = bytes((0x0A,)) + varint(len(self._resource) + len(parts[2]) + scope_len)
        return b"".join(parts)

    def spans(self, t: FinishedTrace) -> tuple[bytes, int]:
        """One request's spans, encoded (`ScopeSpans.spans` fields), and how many."""
        flags = SAMPLED if t.sampled else 0
        trace_id = b"\x0a\x10" + t.trace_id.to_bytes(16, "big")
        server_id = t.server_id.to_bytes(8, "big")
        # After each child span's id: the trace state, and the server span as its parent.
        child_tail = b"\x22\x08" + server_id
        server_flags = flags | _HAS_IS_REMOTE
        server_tail = b""
        if t.parent_id:
            server_flags |= _IS_REMOTE
            server_tail = b"\x22\x08" + t.parent_id.to_bytes(8, "big")
        if t.state:
            state = field(0x1A, t.state.encode("latin-1"))
            child_tail, server_tail = state + child_tail, state + server_tail
        local = _pack_flags(_FLAGS_TAG, flags | _HAS_IS_REMOTE)
        out = field(
            0x12,
            trace_id + b"\x12\x08" + server_id + server_tail + self._name(t.name, KIND_SERVER)
            + _pack_times(0x39, t.start_ns, 0x41, t.end_ns) + self._server_attrs(t)
            + self._first_token(t) + _server_status(t) + _pack_flags(_FLAGS_TAG, server_flags),
        )  # fmt: skip
        count = 1
        if t.route_id:
            out += field(
                0x12,
                trace_id + b"\x12\x08" + t.route_id.to_bytes(8, "big") + child_tail
                + self._name(ROUTE_SPAN, KIND_INTERNAL)
                + _pack_times(0x39, t.route_start_ns, 0x41, t.route_end_ns)
                + self._route_attrs(t) + local,
            )  # fmt: skip
            count += 1
        for span_id, backend, url, attempt, start_ns, end_ns, status, error in t.attempts:
            host, port = _address(url)
            failed = error is not None or status >= 400
            kind = (str(status) if status else "upstream_error") if failed else None
            attrs = self._upstream.get(
                (t.method, host, port, backend, attempt, status or None, kind)
            )
            out += field(
                0x12,
                trace_id + b"\x12\x08" + span_id.to_bytes(8, "big") + child_tail
                + self._name(t.name, KIND_CLIENT) + _pack_times(0x39, start_ns, 0x41, end_ns)
                + attrs + (_status(error or "") if failed else b"") + local,
            )  # fmt: skip
            count += 1
        return out, count

    def _name(self, name: str, kind: int) -> bytes:
        """The `name` and `kind` fields."""
        out = self._names.get(name)
        if out is None:
            if len(self._names) >= _CACHE_LIMIT:
                self._names.clear()
            out = self._names[name] = field(0x2A, name.encode())
        return out + _KINDS[kind]

    def _server_attrs(self, t: FinishedTrace) -> bytes:
        error = str(t.status) if t.status >= 500 else None
        out = self._server.get(
            (t.method, t.path, t.status, t.model, t.stream, t.backend, t.client, error)
        )
        if t.request_id is not None:
            out += key_value(REQUEST_ID, t.request_id)
        if t.ttft_s is not None:
            out += double_attr(TTFT, t.ttft_s)
        if t.input_tokens is not None:
            out += int_attr(INPUT_TOKENS, t.input_tokens)
        if t.output_tokens is not None:
            out += int_attr(OUTPUT_TOKENS, t.output_tokens)
        if t.cached_tokens is not None:
            out += int_attr(CACHED_TOKENS, t.cached_tokens)
        return out

    def _first_token(self, t: FinishedTrace) -> bytes:
        """The `first_token` event, at TTFT after the server span's start."""
        if t.ttft_s is None:
            return b""
        at = t.start_ns + int(t.ttft_s * 1e9)
        return _FIRST_TOKEN_HEAD + _pack_fixed64(at) + _FIRST_TOKEN_NAME

    def _route_attrs(self, t: FinishedTrace) -> bytes:
        out = self._route.get(
            (t.policy, t.target, t.candidates, t.filtered_out or None, t.top_backends or None)
        ) + int_attr(PREFIX_BLOCKS, t.prefix_blocks)  # fmt: skip
        if t.matched_blocks is not None:
            out += int_attr(MATCHED_BLOCKS, t.matched_blocks)
        if t.top_scores:
            out += doubles_attr(TOP_SCORES_KEY, t.top_scores)
        return out


# Attribute keys, in the order the spans carry them (values None are left out). The sets
# of values that repeat from request to request first, then one key per varying value.
SERVER_KEYS = (
    "http.request.method", "url.path", "http.response.status_code", "gen_ai.request.model",
    "kvgate.stream", "kvgate.backend", "client.address", "error.type",
)  # fmt: skip
ROUTE_KEYS = ("kvgate.policy", "kvgate.backend", "kvgate.route.candidates",
              "kvgate.route.filtered_out", "kvgate.route.top_backends")  # fmt: skip
UPSTREAM_KEYS = (
    "http.request.method", "server.address", "server.port", "kvgate.backend",
    "kvgate.attempt", "http.response.status_code", "error.type",
)  # fmt: skip
REQUEST_ID, TTFT = "kvgate.request_id", "kvgate.ttft_s"
INPUT_TOKENS, OUTPUT_TOKENS = "gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens"
CACHED_TOKENS = "gen_ai.usage.cache_read.input_tokens"
PREFIX_BLOCKS, MATCHED_BLOCKS = "kvgate.prefix.blocks", "kvgate.prefix.matched_blocks"
TOP_SCORES_KEY = "kvgate.route.top_scores"
_KINDS = {k: bytes((0x30, k)) for k in (KIND_INTERNAL, KIND_SERVER, KIND_CLIENT)}
_FIRST_TOKEN_NAME = field(0x12, FIRST_TOKEN_EVENT.encode())
_FIRST_TOKEN_HEAD = bytes((0x5A, 9 + len(_FIRST_TOKEN_NAME), 0x09))  # Span.events, time
_FLAGS_TAG = 0x0185  # Span.flags (field 16, fixed32): its tag as a little-endian varint
_pack_times = struct.Struct("<BQBQ").pack  # start and end, fields 7 and 8, fixed64
_pack_flags = struct.Struct("<HI").pack


def _status(message: str) -> bytes:
    """`Span.status` = ERROR with `message`."""
    body = (field(0x12, message.encode()) if message else b"") + bytes((0x18, STATUS_ERROR))
    return field(0x7A, body)


def _server_status(t: FinishedTrace) -> bytes:
    if t.status < 500:  # a 4xx is the client's error, not the server span's
        return b""
    return _status(t.error or "")
