"""W3C Trace Context (`traceparent`, `tracestate`): parsed from a request, written for the
engine. Version 00 is parsed strictly; a later version is read by its first four fields,
as the spec asks. An invalid `traceparent` is ignored, and its `tracestate` with it."""

from __future__ import annotations

from dataclasses import dataclass

SAMPLED = 0x01
_HEX = frozenset("0123456789abcdef")


@dataclass(frozen=True, slots=True)
class RemoteParent:
    """The caller's span, from its `traceparent` (and `tracestate`, passed on unchanged)."""

    trace_id: int
    span_id: int
    flags: int
    state: str | None = None

    @property
    def sampled(self) -> bool:
        return bool(self.flags & SAMPLED)


def _hex(text: str, size: int) -> int | None:
    if len(text) != size or not _HEX.issuperset(text):
        return None
    return int(text, 16)


def parse_traceparent(value: str | None, state: str | None = None) -> RemoteParent | None:
    """The parent a `traceparent` header names, or None when it is absent or invalid."""
    if not value:
        return None
    parts = value.strip().split("-")
    if len(parts) < 4:
        return None
    version = _hex(parts[0], 2)
    if version is None or version == 0xFF or (version == 0 and len(parts) != 4):
        return None
    trace_id, span_id, flags = _hex(parts[1], 32), _hex(parts[2], 16), _hex(parts[3], 2)
    if not trace_id or not span_id or flags is None:  # absent, malformed, or all zeros
        return None
    return RemoteParent(trace_id, span_id, flags, state.strip() if state else None)


def traceparent(trace_id: int, span_id: int, sampled: bool) -> bytes:
    """The `traceparent` value naming span `span_id` as the parent."""
    return b"00-%032x-%016x-%s" % (trace_id, span_id, b"01" if sampled else b"00")
