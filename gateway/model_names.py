"""A rewritten request's model names: the body's `model` replaced, the answer's named back.

`with_model(body, model)`: the request body (a JSON object) with `model` set, parsed and dumped
again (orjson). `ModelNameRestorer(target, asked)` relays an answer with every member
`"model": "<target>"` (any JSON spacing) written `"model": "<asked>"`, chunk by chunk, events
and whole answers alike; it holds back only a chunk's tail that could begin a member cut by
the chunk boundary (at most `_WINDOW` bytes beyond the names), so a stream is not buffered.
A quote inside a JSON string is escaped, so text that merely mentions the model is left alone.
"""

from __future__ import annotations

import re

import orjson

_KEY = b'"model"'
_SPACE = b" \t\r\n"
_WINDOW = 32  # spacing around the colon tolerated in a member cut by a chunk boundary


def with_model(body: bytes, model: str) -> bytes:
    """`body` with its top-level `model` set to `model`."""
    data = orjson.loads(body)
    data["model"] = model
    return orjson.dumps(data)


class ModelNameRestorer:
    """Writes `target` back as `asked` in an answer's `model` members (module docstring)."""

    __slots__ = ("_asked", "_held", "_pattern", "_target")

    def __init__(self, target: str, asked: str) -> None:
        self._target = orjson.dumps(target)  # as JSON writes it, quotes included
        self._asked = orjson.dumps(asked)
        self._pattern = re.compile(rb'("model"\s*:\s*)' + re.escape(self._target))
        self._held = b""

    def feed(self, chunk: bytes, end: bool = False) -> bytes:
        """What to relay of `chunk` now (`end`: the answer's last chunk, nothing held)."""
        data = self._held + chunk if self._held else chunk
        self._held = b""
        if data.find(_KEY) >= 0:  # not `in`: bytes.__contains__ raises inside
            data = self._pattern.sub(lambda m: m.group(1) + self._asked, data)
        if end:
            return data
        cut = self._cut(data)
        self._held = data[cut:]
        return data[:cut]

    def finish(self) -> bytes:
        """What is still held when the answer ends without a last `feed(end=True)`."""
        held, self._held = self._held, b""
        return held

    def _cut(self, data: bytes) -> int:
        """Where a possibly cut member starts (len(data): none)."""
        start = max(0, len(data) - len(_KEY) - len(self._target) - _WINDOW)
        at = data.find(b'"', start)
        while at != -1:
            if self._could_begin(data[at:]):
                return at
            at = data.find(b'"', at + 1)
        return len(data)

    def _could_begin(self, tail: bytes) -> bool:
        """Whether `tail` is a proper beginning of a member naming the target."""
        if len(tail) <= len(_KEY):
            return _KEY.startswith(tail)
        if not tail.startswith(_KEY):
            return False
        rest = tail[len(_KEY) :].lstrip(_SPACE)
        if not rest:
            return True
        if rest[:1] != b":":
            return False
        rest = rest[1:].lstrip(_SPACE)
        return len(rest) < len(self._target) and self._target.startswith(rest)
