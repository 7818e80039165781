"""Relaying a server-sent-event stream on event boundaries, so a cut stream still parses.

An SSE client acts on an event only at the blank line that ends it, and the `data:` lines of
one event are joined. A stream relayed byte for byte and cut mid-event by a dying backend
leaves the client holding half an event; an error event written after it would be glued
onto that half (one unparsable `data`). So `EventAligner` relays whole events only: a
chunk's trailing partial event waits for its rest, which costs the client nothing (it could
not act on it before). Engines send one or more whole events per chunk, so the usual chunk
passes with one `endswith`.

When the stream breaks, `error_event` drops the held partial event and returns the error
event to send, preceded by a blank line if what was relayed did not end on one (only after
an event larger than `MAX_HELD_BYTES`, relayed unaligned rather than held without bound).
"""

from __future__ import annotations

import orjson

MAX_HELD_BYTES = 1 << 20
# Events end with a blank line: "\n\n" (what vLLM and most servers send) or "\r\n\r\n".
_ENDINGS = (b"\n\n", b"\r\n\r\n")


def last_event_end(data: bytes) -> int:
    """Where the last complete event in `data` ends; 0 if none does."""
    lf, crlf = data.rfind(b"\n\n"), data.rfind(b"\r\n\r\n")
    return max(lf + 2 if lf >= 0 else 0, crlf + 4 if crlf >= 0 else 0)


class EventAligner:
    """Cuts relayed SSE bytes at event boundaries; see the module docstring."""

    __slots__ = ("_held", "dropped", "on_boundary")

    def __init__(self) -> None:
        self._held = b""
        self.on_boundary = True  # what was relayed so far ends with a blank line (or is empty)
        self.dropped = 0  # bytes of a partial event dropped by `error_event`

    def feed(self, chunk: bytes) -> bytes:
        """What to relay of `chunk` now: the whole events it completes."""
        data = self._held + chunk if self._held else chunk
        if not data or data.endswith(_ENDINGS):
            self._held = b""
            return self._relayed(data)
        cut = last_event_end(data)
        if len(data) - cut > MAX_HELD_BYTES:
            cut = len(data)  # no boundary in sight: relay rather than hold without bound
        self._held = data[cut:]
        return self._relayed(data[:cut])

    def finish(self) -> bytes:
        """The rest, at the normal end of the stream (relayed as it is)."""
        rest, self._held = self._held, b""
        return self._relayed(rest)

    def error_event(self, error: dict[str, str]) -> bytes:
        """The bytes that end a broken stream with `data: {"error": ...}` as an event of its
        own; the held partial event is dropped."""
        self.dropped, self._held = len(self._held), b""
        event = b"data: " + orjson.dumps({"error": error}) + b"\n\n"
        return event if self.on_boundary else b"\n\n" + event

    def _relayed(self, data: bytes) -> bytes:
        if data:
            self.on_boundary = data.endswith(_ENDINGS)
        return data
