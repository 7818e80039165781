"""Stored response ids: read from the paths that name one, and off the answers that make one.

`object_path` splits `/v1/responses/{id}` and `/v1/responses/{id}/cancel` (`STORED_METHODS`:
the methods each takes; `replays` reads GET's `?stream=true`). `ResponseIdReader`
is fed every relayed chunk of a `POST /v1/responses` answer and tells the id once: a JSON body's
top-level `id` when its `object` is `response` (chunks kept by reference up to `MAX_BODY_BYTES`,
parsed at the end; past that, only an `id` opening the body counts), or an event stream's
`response.created` event's `response.id` (scanned as events pass, nothing held back from the
client; the scan stops after that event or `MAX_SCAN_BYTES`). A response marked `store: false`
gives no id. Ids are at most `MAX_ID_CHARS` of `[A-Za-z0-9_.:-]` (others are not taken).
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import parse_qs

import orjson

PREFIX = "/v1/responses/"
# The methods on a stored response, by action: `/v1/responses/{id}`, `.../cancel`.
STORED_METHODS: dict[str, tuple[str, ...]] = {"": ("GET", "DELETE"), "cancel": ("POST",)}
MAX_ID_CHARS = 256
MAX_BODY_BYTES = 1 << 20
MAX_SCAN_BYTES = 256 * 1024
_ID = re.compile(rf"[A-Za-z0-9_.:-]{{1,{MAX_ID_CHARS}}}")
_HEAD_ID = re.compile(rb'\A\s*\{\s*"id"\s*:\s*"(' + _ID.pattern.encode() + rb')"')
_CREATED = b"response.created"
_EVENT_END = re.compile(rb"\r?\n\r?\n")


def valid_id(value: object) -> bool:
    return isinstance(value, str) and _ID.fullmatch(value) is not None


def object_path(path: str) -> tuple[str, str] | None:
    """`(id, action)` for a path under `/v1/responses/` (action "" or "cancel"), else None.
    The id is not checked (`valid_id`): an odd one is the engine's to refuse, or not known."""
    if not path.startswith(PREFIX):
        return None
    response_id, _, action = path[len(PREFIX) :].partition("/")
    if not response_id or action not in STORED_METHODS or (not action and path.endswith("/")):
        return None
    return response_id, action


def replays(query: str) -> bool:
    """Whether a GET's query asks for the stored response's events (`stream=true`)."""
    return parse_qs(query).get("stream", [""])[-1].lower() == "true"


class ResponseIdReader:
    """Finds a stored response's id in the answer that created it (module docstring)."""

    __slots__ = ("_chunks", "_done", "_held", "_scanned", "_size", "_sse")

    def __init__(self, sse: bool) -> None:
        self._sse = sse
        self._chunks: list[bytes] = []
        self._size = 0
        self._held = b""  # an event stream's unfinished event
        self._scanned = 0
        self._done = False

    def feed(self, chunk: bytes, end: bool) -> str | None:
        """The id when `chunk` (the last one if `end`) reveals it; None before and after."""
        if self._done:
            return None
        found = self._scan(chunk) if self._sse else self._collect(chunk, end)
        if found is not None or end:
            self._done = True
            self._chunks, self._held = [], b""
        return found

    def _collect(self, chunk: bytes, end: bool) -> str | None:
        self._size += len(chunk)
        if self._size <= MAX_BODY_BYTES or not self._chunks:
            self._chunks.append(chunk)
        elif len(self._chunks) > 1:
            del self._chunks[1:]  # past the limit: only the head is read
        if not end:
            return None
        if self._size > MAX_BODY_BYTES:
            head = _HEAD_ID.match(self._chunks[0]) if self._chunks else None
            return head.group(1).decode() if head else None
        try:
            return _stored_id(orjson.loads(b"".join(self._chunks)))
        except orjson.JSONDecodeError:
            return None

    def _scan(self, chunk: bytes) -> str | None:
        data = self._held + chunk if self._held else chunk
        self._scanned += len(chunk)
        start = 0
        for m in _EVENT_END.finditer(data):
            event, start = data[start : m.start()], m.end()
            if event.find(_CREATED) >= 0:  # not `in`: bytes.__contains__ raises inside
                found = _created_id(event)
                if found is not None:
                    return found
        self._held = data[start:]
        if self._scanned > MAX_SCAN_BYTES:
            self._done = True  # no `response.created` near the start: not a stored response
        return None


def _created_id(event: bytes) -> str | None:
    """The `response.id` of a `response.created` event's data, if that is what it is."""
    lines = event.splitlines()
    data = b"\n".join(ln[5:].lstrip(b" ") for ln in lines if ln.startswith(b"data:"))
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(obj, dict) or obj.get("type") != "response.created":
        return None
    return _stored_id(obj.get("response"))


def _stored_id(obj: Any) -> str | None:
    if not isinstance(obj, dict) or obj.get("object") != "response":
        return None
    if obj.get("store") is False:
        return None
    response_id = obj.get("id")
    return response_id if valid_id(response_id) else None
