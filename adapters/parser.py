"""A small parser of the Prometheus text format that reads only the metrics asked for.

It runs every 50 ms per backend, so it does as little as it can. Instead of splitting the
whole page into lines (a vLLM page has ~700, mostly histogram buckets, and splitting alone
costs more than everything below), it finds a wanted metric's first line with `str.find`
for newline + name, which skips comments and every other metric in C, reads the following
lines of the same group (the format keeps a metric's lines together), and splits only
those into name, labels and value. Label blocks are memoised, as they repeat verbatim.

Label values may hold escaped quotes, backslashes and newlines, and commas (vLLM's LoRA
lists). Values may be `NaN` or `±Inf`; an optional trailing timestamp is ignored.
OpenMetrics exemplars are not supported (scrapers ask for the plain text format).
Samples come back in the order they appear; combining several series is the caller's job.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType

_ESCAPE = re.compile(r"\\(.)")
_UNESCAPED = {"\\": "\\", '"': '"', "n": "\n"}
_NO_LABELS: Mapping[str, str] = MappingProxyType({})


class MetricsFormatError(ValueError):
    """A line of a wanted metric does not follow the Prometheus text format."""


@dataclass(frozen=True, slots=True)
class Sample:
    """One series of a metric: its labels and its value (may be NaN or ±Inf)."""

    labels: Mapping[str, str]
    value: float


def parse_samples(text: str, names: Iterable[str]) -> dict[str, list[Sample]]:
    """Samples of the metrics in `names` found in `text`; absent metrics have no key."""
    found = {name: samples_of(text, name) for name in frozenset(names)}
    return {name: samples for name, samples in found.items() if samples}


def samples_of(text: str, name: str) -> list[Sample]:
    """Samples of metric `name` in `text`, in the order they appear (empty if absent)."""
    return [_parse_sample(line, len(name)) for line in _lines_of(text, name)]


def _lines_of(text: str, name: str) -> Iterator[str]:
    """The sample lines of metric `name`, found by substring search.

    A raw newline cannot occur inside a sample line (label values escape it), so every
    sample of `name` starts right after a newline or at the start of the text. The format
    keeps all lines of a metric in one group, so the search stops after the group instead
    of scanning the rest of the page.
    """
    needle, size, skip = "\n" + name, len(text), len(name)
    start = 0 if text.startswith(name) else _next_line(text, needle, 0)
    in_group = False
    while start >= 0:
        after = start + skip
        end = text.find("\n", after)
        if end < 0:
            end = size
        # The name must end here: `vllm:num_requests_waiting_by_reason` is another metric.
        if after < size and text[after] in "{ \t":
            in_group = True
            yield text[start:end]
        elif in_group:
            return
        if in_group:
            start = end + 1 if text.startswith(name, end + 1) else -1
        else:
            start = _next_line(text, needle, end)


def _next_line(text: str, needle: str, pos: int) -> int:
    found = text.find(needle, pos)
    return found + 1 if found >= 0 else -1


def _parse_sample(line: str, pos: int) -> Sample:
    labels: Mapping[str, str] = _NO_LABELS
    rest = line[pos:].lstrip()
    if rest.startswith("{"):
        # Only the label block can hold "}" (values and timestamps cannot), so the last
        # one closes it.
        end = rest.rfind("}") + 1
        block = rest[:end]
        labels = _cached_labels(block) if len(block) <= _MAX_CACHED_BLOCK else _parse_labels(block)
        rest = rest[end:]
    fields = rest.split()
    if not fields:
        raise MetricsFormatError(f"no value in {line!r}")
    try:
        value = float(fields[0])  # accepts NaN, +Inf, -Inf
    except ValueError:
        raise MetricsFormatError(f"bad value in {line!r}") from None
    return Sample(labels, value)


# Label blocks repeat verbatim from scrape to scrape while values change, and info metrics
# carry dozens of labels (vllm:cache_config_info has ~35, ~1.5 KB): memoising the pure block
# parse saves most of the work. Only blocks of a sane size are kept: a page whose label
# blocks are megabytes and change every scrape would otherwise pin 1024 of them.
_MAX_CACHED_BLOCK = 8192


def _parse_labels(block: str) -> Mapping[str, str]:
    """Parse a whole label block `{k="v",...}` into read-only labels."""
    labels: dict[str, str] = {}
    pos, size = 1, len(block)
    while True:
        while pos < size and block[pos] in " ,":
            pos += 1
        if pos >= size:
            raise MetricsFormatError(f"unterminated labels in {block!r}")
        if block[pos] == "}":
            if pos + 1 != size:
                raise MetricsFormatError(f"text after labels in {block!r}")
            return MappingProxyType(labels)
        eq = block.find("=", pos)
        if eq < 0 or block[eq + 1 : eq + 2] != '"':
            raise MetricsFormatError(f"bad label in {block!r}")
        start = eq + 2
        end = _closing_quote(block, start)
        raw = block[start:end]
        labels[block[pos:eq].strip()] = _unescape(raw) if "\\" in raw else raw
        pos = end + 1


_cached_labels = functools.lru_cache(maxsize=1024)(_parse_labels)


def _closing_quote(text: str, start: int) -> int:
    end = text.find('"', start)
    while end >= 0:
        backslashes = 0
        while text[end - 1 - backslashes] == "\\":
            backslashes += 1
        if backslashes % 2 == 0:  # an even run escapes itself, not the quote
            return end
        end = text.find('"', end + 1)
    raise MetricsFormatError(f"unterminated label value in {text!r}")


def _unescape(raw: str) -> str:
    return _ESCAPE.sub(lambda m: _UNESCAPED.get(m.group(1), m.group()), raw)
