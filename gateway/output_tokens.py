"""How many tokens an engine generated, read off the relayed response without buffering it.

The answer's `usage` says so (`completion_tokens`, or `output_tokens` for the Responses API):
at the end of a JSON body, or in the last chunk of a stream sent with
`stream_options.include_usage`. The counter keeps only the last `TAIL_BYTES` of the relayed
bytes and looks for the last `"usage": {...}` there once the response is done. For a stream
without usage it falls back to the number of data events that carried text (a non-empty
`content`, `text`, Responses `delta`, reasoning or tool-call string), found by one regex
search per chunk.
"""

from __future__ import annotations

import re

import orjson

TAIL_BYTES = 8192
_USAGE = re.compile(rb'"usage"\s*:\s*\{')
_TEXT = re.compile(rb'"(?:content|reasoning_content|text|delta|arguments)"\s*:\s*"[^"]')


class OutputTokenCounter:
    """Feed it every relayed chunk; ask `output_tokens()` at the end."""

    __slots__ = ("_sse", "_tail", "_text_events")

    def __init__(self, sse: bool) -> None:
        self._sse = sse
        self._tail = bytearray()
        self._text_events = 0

    def feed(self, chunk: bytes) -> None:
        if self._sse:
            self._text_events += len(_TEXT.findall(chunk))
        self._tail += chunk
        if len(self._tail) > 2 * TAIL_BYTES:  # trim in batches: amortised O(1) a byte
            del self._tail[:-TAIL_BYTES]

    def output_tokens(self) -> int | None:
        """From the last usage object; else, for a stream, the text events; else None."""
        usage = last_usage_count(bytes(self._tail[-TAIL_BYTES:]))
        if usage is not None:
            return usage
        return self._text_events if self._sse else None


def last_usage_count(tail: bytes) -> int | None:
    """The generated-token count of the last complete `"usage": {...}` object in `tail`."""
    for match in reversed(list(_USAGE.finditer(tail))):
        start = match.end() - 1
        end = _closing_brace(tail, start)
        if end is None:
            continue
        try:
            usage = orjson.loads(tail[start : end + 1])
        except orjson.JSONDecodeError:
            continue
        for key in ("completion_tokens", "output_tokens"):
            value = usage.get(key)
            if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
                return value
    return None


def _closing_brace(data: bytes, start: int) -> int | None:
    # A usage object holds numbers and nested objects of numbers: no strings with braces.
    depth = 0
    for i in range(start, min(len(data), start + 2048)):
        c = data[i]
        if c == 0x7B:  # {
            depth += 1
        elif c == 0x7D:  # }
            depth -= 1
            if depth == 0:
                return i
    return None
