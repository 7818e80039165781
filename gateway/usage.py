"""What the engine says a request used, read off the relayed answer without buffering it.

Two readers, fed every upstream chunk as it is relayed (`feed` returns what to relay, `finish`
what is left at the end, `usage` the answer's usage once it is done):
- `UsageTap` relays everything and keeps the last chunks (`TAIL_BYTES`); `usage()` reads the
  last `"usage": {...}` or SGLang's `"meta_info": {...}` there (`parse_last_usage`): near a
  JSON body's end, or in a stream's last data event (`stream_options.include_usage`;
  Responses' `response.completed`; each event of SGLang's `/generate` stream).
- `UsageEventFilter`, for a stream whose client did not ask for usage (`ask_for_usage` made the
  forwarded body ask for it): it takes the event this adds (the data event with `"usage": {` and
  `"choices": []`) out of what is relayed and reads the usage from it, relaying whole events;
  per chunk an `endswith` and a substring search, no JSON parsing until the usage event.

`Usage.cached_tokens` is None when the answer did not say: vLLM fills `prompt_tokens_details.
cached_tokens` only with `--enable-prompt-tokens-details`; SGLang's meta_info always has it.
"""

from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass
from typing import Any, Protocol

import orjson

from gateway.sse_events import last_event_end
from routing.frozen import fast_init

TAIL_BYTES = 8192
STREAM_USAGE_APIS = frozenset({"chat", "completions"})  # the APIs with stream_options
_USAGE = re.compile(rb'"usage"\s*:\s*\{')  # a key: inside a JSON string the quotes are escaped
_COUNTS = re.compile(rb'"(?:usage|meta_info)"\s*:\s*\{')
# A usage object holds numbers and objects of numbers: two levels of braces, no strings
# (`_object_end` finds where one ends).
_EMPTY_CHOICES = re.compile(rb'"choices"\s*:\s*\[\s*\]')
_KEY = b'"usage"'
_META_KEY = b'"meta_info"'
_STREAM_OPTIONS = b'"stream_options"'
_INCLUDE_USAGE = b'"stream_options":{"include_usage":true}}'


@fast_init
@dataclass(frozen=True, slots=True)
class Usage:
    """Token counts from an answer's `usage` (None: not reported)."""

    prompt_tokens: int | None
    cached_tokens: int | None
    completion_tokens: int | None


class UsageReader(Protocol):
    def feed(self, chunk: bytes) -> bytes: ...

    def finish(self) -> bytes: ...

    def usage(self) -> Usage | None: ...


class UsageTap:
    """Relays every chunk; keeps references to the last ones (at least `TAIL_BYTES`),
    copying nothing until `usage()`."""

    __slots__ = ("_chunks", "_size")

    def __init__(self) -> None:
        self._chunks: deque[bytes] = deque()
        self._size = 0

    def feed(self, chunk: bytes) -> bytes:
        chunks = self._chunks
        chunks.append(chunk)
        self._size += len(chunk)
        if self._size - len(chunks[0]) >= TAIL_BYTES:
            self._size -= len(chunks.popleft())
        return chunk

    def finish(self) -> bytes:
        return b""

    def usage(self) -> Usage | None:
        return parse_last_usage(b"".join(self._chunks)[-TAIL_BYTES:])


def parse_last_usage(tail: bytes) -> Usage | None:
    """The last complete `"usage": {...}` or `"meta_info": {...}` object in `tail` that holds
    a token count (a `meta_info` holding strings with braces is skipped: only two levels of
    braces are matched)."""
    end = len(tail)
    while (at := max(tail.rfind(_KEY, 0, end), tail.rfind(_META_KEY, 0, end))) >= 0:
        end = at
        key = _COUNTS.match(tail, at)
        start = key.end() - 1 if key else -1
        stop = _object_end(tail, start) if key else -1
        if stop < 0:
            continue
        try:
            usage = usage_from(orjson.loads(tail[start:stop]))
        except orjson.JSONDecodeError:
            continue
        if usage is not None:
            return usage
    return None


def _object_end(data: bytes, start: int) -> int:
    """Where the object opening at `data[start]` (a `{`) ends, just past its `}`, if it nests
    no deeper than one object in it (the regex `\\{(?:[^{}]|\\{[^{}]*\\})*\\}`); -1 if it
    does or is cut off. Brace to brace with `find`: a regex steps through every byte."""
    pos = start + 1
    while True:
        close = data.find(b"}", pos)
        if close < 0:
            return -1
        inner = data.find(b"{", pos, close)
        if inner < 0:
            return close + 1  # no object opens before this brace: it closes ours
        inner_close = data.find(b"}", inner + 1)
        if inner_close < 0 or data.find(b"{", inner + 1, inner_close) >= 0:
            return -1  # cut off, or a third level
        pos = inner_close + 1


def usage_from(obj: dict[str, Any]) -> Usage | None:
    """The token counts of a parsed `usage` object (None: it has none)."""
    prompt = _count(obj, "prompt_tokens", "input_tokens")
    completion = _count(obj, "completion_tokens", "output_tokens")
    if prompt is None and completion is None:
        return None
    details = obj.get("prompt_tokens_details") or obj.get("input_tokens_details")
    # SGLang's meta_info counts cached tokens beside the prompt's.
    cached = _count(details if isinstance(details, dict) else obj, "cached_tokens")
    return Usage(prompt, cached, completion)


def _count(obj: dict[str, Any], *keys: str) -> int | None:
    for key in keys:
        value = obj.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
    return None


def ask_for_usage(body: bytes) -> bytes | None:
    """`body` (a streaming request's JSON object) with `stream_options.include_usage` set;
    None when the client asked for usage itself. The usual body, without `stream_options`,
    is spliced without parsing."""
    if body.find(_STREAM_OPTIONS) < 0:  # find(), not `in`: it raises nothing inside
        head = body.rstrip()
        if head.endswith(b"}"):
            return head[:-1] + b"," + _INCLUDE_USAGE
    data = orjson.loads(body)
    options = data.get("stream_options")
    if isinstance(options, dict) and options.get("include_usage") is True:
        return None
    data["stream_options"] = {
        **(options if isinstance(options, dict) else {}),
        "include_usage": True,
    }
    return orjson.dumps(data)


class UsageEventFilter:
    """Relays an SSE stream minus its usage-only event, and reads the usage from that event
    (see the module docstring)."""

    __slots__ = ("_event", "_held")

    def __init__(self) -> None:
        self._held = b""
        self._event: bytes | None = None  # the usage event, once taken out

    def feed(self, chunk: bytes) -> bytes:
        """What to relay of `chunk` now (possibly nothing)."""
        data = self._held + chunk if self._held else chunk
        if self._event is not None:
            self._held = b""
            return data
        if data.endswith(b"\n\n"):  # whole events: the usual chunk
            self._held = b""
        else:
            cut = last_event_end(data)
            self._held = data[cut:]
            data = data[:cut]
        return self._drop_usage_event(data) if data.find(_KEY) >= 0 else data

    def finish(self) -> bytes:
        """The rest, at the end of the stream (an unfinished event, relayed as it is)."""
        rest, self._held = self._held, b""
        return rest

    def usage(self) -> Usage | None:
        return parse_last_usage(self._event) if self._event is not None else None

    def _drop_usage_event(self, events: bytes) -> bytes:
        for match in _USAGE.finditer(events):
            start = _event_start(events, match.start())
            end = _event_end(events, match.end())
            if _EMPTY_CHOICES.search(events, start, end):
                self._event = events[start:end]
                return events[:start] + events[end:]
        return events


def _event_start(data: bytes, pos: int) -> int:
    """Where the event holding `pos` starts."""
    lf, crlf = data.rfind(b"\n\n", 0, pos), data.rfind(b"\r\n\r\n", 0, pos)
    return max(lf + 2 if lf >= 0 else 0, crlf + 4 if crlf >= 0 else 0)


def _event_end(data: bytes, pos: int) -> int:
    """Where the event holding `pos` ends (the end of `data` if it does not)."""
    lf, crlf = data.find(b"\n\n", pos), data.find(b"\r\n\r\n", pos)
    ends = [i + n for i, n in ((lf, 2), (crlf, 4)) if i >= 0]
    return min(ends) if ends else len(data)
