"""The recent end of a growing recording, read incrementally (`kvgate tune`'s input).

`RecordingTail.read()` parses only the lines appended since its last call and keeps the
requests of the last `horizon_s` seconds (by arrival, up to the latest arrival), so an
evaluation costs the same whether the recording holds an hour or a month. It starts over from
the first line when the file was truncated or replaced (another inode, a shorter file or
another header line: a rotated or restarted recording). A last line cut short waits for the
rest of it; an empty file (a new recording not yet written to) holds no requests. The
requests it returns are those `load_recorded` would return for the same file,
less the ones older than the horizon. Compressed files are read whole every time.
"""

from __future__ import annotations

import os
from datetime import datetime
from pathlib import Path

import orjson

from routing.traces.files import GZIP_MAGIC, XZ_MAGIC
from routing.traces.recorded import HEADER_KEY, _header, _request, load_recorded
from routing.traces.request import TraceFormatError, TraceRequest, reason


class RecordingTail:
    """The last `horizon_s` seconds of the recording at `path` (see the module docstring)."""

    def __init__(self, path: str | Path, horizon_s: float) -> None:
        self.path = Path(path)
        self.horizon_s = horizon_s
        self.restarts = 0  # times the file was found truncated or replaced
        self.bytes_read = 0
        self._start(None)

    def _start(self, identity: tuple[int, int] | None) -> None:
        self._identity = identity
        self._offset = 0
        self._lineno = 0
        self._head = b""  # the file's first line: another one means another recording
        self._first: datetime | None = None
        self._segment_s = 0.0
        self._block_tokens = 0
        self._interned: dict[int, int] = {}
        self._requests: list[TraceRequest] = []

    def read(self) -> list[TraceRequest]:
        """The recording's requests of the last `horizon_s` seconds, in arrival order."""
        st = os.stat(self.path)
        identity = (st.st_dev, st.st_ino)
        with self.path.open("rb") as f:
            head = f.read(max(len(self._head), len(XZ_MAGIC)))
            if head.startswith(GZIP_MAGIC) or head == XZ_MAGIC:
                return self._recent(load_recorded(self.path))
            replaced = identity != self._identity or st.st_size < self._offset
            if replaced or not head.startswith(self._head):
                self.restarts += self._identity is not None
                self._start(identity)
            f.seek(self._offset)
            data = f.read()
        self.bytes_read += len(data)
        complete = data.rfind(b"\n") + 1
        fresh = [r for line in data[:complete].splitlines(keepends=True) if (r := self._line(line))]
        self._offset += complete
        rest = data[complete:]
        partial = self._partial(rest) if rest.strip() else None
        self._requests = self._recent([*self._requests, *fresh])
        return self._recent([*self._requests, partial]) if partial else list(self._requests)

    def _line(self, line: bytes) -> TraceRequest | None:
        """One complete line: a request, or None (a header or a blank line)."""
        self._lineno += 1
        if not line.strip():
            return None
        try:
            row = orjson.loads(line)
            if not isinstance(row, dict):
                raise ValueError("expected a JSON object")
            if HEADER_KEY in row:
                started, self._block_tokens = _header(row)
                self._first = self._first or started
                self._segment_s = (started - self._first).total_seconds()
                if self._lineno == 1:
                    self._head = line
                return None
            if self._first is None:
                raise ValueError(f"expected a header line with {HEADER_KEY!r} first")
            return _request(row, self._segment_s, self._block_tokens, self._interned)
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            raise TraceFormatError(self.path, self._lineno, reason(exc)) from None

    def _partial(self, rest: bytes) -> TraceRequest | None:
        """A last line without its newline: the request if it parses already (as
        `load_recorded` reads it), else None until the rest arrives."""
        try:
            row = orjson.loads(rest)
            if not isinstance(row, dict) or HEADER_KEY in row or self._first is None:
                return None
            return _request(row, self._segment_s, self._block_tokens, {})
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
            return None

    def _recent(self, requests: list[TraceRequest]) -> list[TraceRequest]:
        """In arrival order (a stable sort: file order among equals), the last `horizon_s`."""
        requests.sort(key=lambda r: r.arrival_s)
        if not requests:
            return requests
        start = requests[-1].arrival_s - self.horizon_s
        if requests[0].arrival_s > start:
            return requests
        if len(self._interned) > 4 * sum(len(r.hash_ids) for r in requests) + 100_000:
            self._interned = {}  # ids of pruned requests: drop them now and then
        return [r for r in requests if r.arrival_s > start]
