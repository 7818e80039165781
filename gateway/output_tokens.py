"""How many tokens an engine generated, read off the relayed response without buffering it.

The answer's usage says so (`completion_tokens`, or `output_tokens` for the Responses API;
read by `gateway.usage.UsageTap`). For a stream without usage the counter falls back to the
number of data events that carried text (a non-empty `content`, `text`, Responses `delta`,
reasoning or tool-call string), found by one regex search per chunk.
"""

from __future__ import annotations

import re

from gateway.usage import Usage

_TEXT = re.compile(rb'"(?:content|reasoning_content|text|delta|arguments)"\s*:\s*"[^"]')


class OutputTokenCounter:
    """Feed it every relayed chunk; ask `output_tokens(usage)` at the end."""

    __slots__ = ("_sse", "_text_events")

    def __init__(self, sse: bool) -> None:
        self._sse = sse
        self._text_events = 0

    def feed(self, chunk: bytes) -> None:
        if self._sse:
            self._text_events += len(_TEXT.findall(chunk))

    def output_tokens(self, usage: Usage | None) -> int | None:
        """From the usage; else, for a stream, the text events; else None."""
        if usage is not None and usage.completion_tokens is not None:
            return usage.completion_tokens
        return self._text_events if self._sse else None
