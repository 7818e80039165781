"""`load_trace`: one entry point for every trace format, with the format detected.

Detection: a `.csv` file, or a first line starting with `TIMESTAMP,`, is Azure's; a JSON
first line with `kvgate_trace` is a kvgate recording; one with `timestamp` and `hash_ids` is
Mooncake's. Anything else needs an explicit `format`. Gzip and xz files are read decompressed
(`routing.traces.files`).
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import pairwise
from pathlib import Path

import orjson

from routing.traces.azure import load_azure
from routing.traces.files import open_trace, plain_name
from routing.traces.mooncake import load_mooncake
from routing.traces.recorded import HEADER_KEY, load_recorded
from routing.traces.request import TraceFormatError, TraceRequest

Loader = Callable[[str | Path, int | None], list[TraceRequest]]
LOADERS: dict[str, Loader] = {
    "mooncake": load_mooncake,
    "azure": load_azure,
    "kvgate": load_recorded,
}
FORMATS = ("auto", *LOADERS)


def load_trace(
    path: str | Path, format: str = "auto", limit: int | None = None
) -> list[TraceRequest]:
    """The trace's requests in arrival order (the first `limit` of them), arrival times from
    the trace's start. `format`: auto, mooncake, azure or kvgate."""
    if format not in FORMATS:
        raise ValueError(f"unknown trace format {format!r}; expected one of {', '.join(FORMATS)}")
    path = Path(path)
    loader = LOADERS[detect_format(path) if format == "auto" else format]
    requests = loader(path, limit)
    if any(a.arrival_s > b.arrival_s for a, b in pairwise(requests)):
        requests.sort(key=lambda r: r.arrival_s)  # stable: ties keep file order
    return requests


def detect_format(path: str | Path) -> str:
    path = Path(path)
    if plain_name(path).suffix.lower() == ".csv":
        return "azure"
    first = _first_line(path)
    if first.startswith(b"TIMESTAMP,"):
        return "azure"
    if first.startswith(b"{"):
        try:
            row = orjson.loads(first)
        except orjson.JSONDecodeError as exc:
            raise TraceFormatError(path, None, f"first line is not valid JSON: {exc}") from None
        if isinstance(row, dict) and HEADER_KEY in row:
            return "kvgate"
        if isinstance(row, dict) and "timestamp" in row and "hash_ids" in row:
            return "mooncake"
    raise TraceFormatError(
        path, None, "cannot tell the trace format from its first line; give it explicitly"
    )


def _first_line(path: Path) -> bytes:
    with open_trace(path) as f:
        for line in f:
            if line.strip():
                return line.strip().lstrip(b"\xef\xbb\xbf")
    raise TraceFormatError(path, None, "empty file")
