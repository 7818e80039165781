"""Mooncake's JSONL traces (FAST'25 release, Kimi / Moonshot AI).

One request a line: `{"timestamp": ms from the start, "input_length": tokens,
"output_length": tokens, "hash_ids": [int, ...]}`, one id per 512-token block of the prompt,
the last block partial (`len(hash_ids) == ceil(input_length / 512)`). Ids are chained: an id
names the whole prefix up to its block.
"""

from __future__ import annotations

from pathlib import Path

import orjson

from routing.traces.files import open_trace
from routing.traces.request import (
    MOONCAKE_BLOCK_TOKENS,
    TraceFormatError,
    TraceRequest,
    count,
    id_tuple,
    reason,
)


def load_mooncake(path: str | Path, limit: int | None = None) -> list[TraceRequest]:
    """The first `limit` requests (all by default), in file order; blank lines are skipped."""
    out: list[TraceRequest] = []
    interned: dict[int, int] = {}
    with open_trace(path) as f:
        for lineno, line in enumerate(f, 1):
            if limit is not None and len(out) >= limit:
                break
            if not line.strip():
                continue
            try:
                out.append(_parse(line, interned))
            except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
                raise TraceFormatError(path, lineno, reason(exc)) from None
    return out


def _parse(line: bytes, interned: dict[int, int]) -> TraceRequest:
    row = orjson.loads(line)
    if not isinstance(row, dict):
        raise ValueError("expected a JSON object")
    ts = row["timestamp"]
    if isinstance(ts, bool) or not isinstance(ts, int | float) or ts < 0:
        raise ValueError(f"timestamp must be a non-negative number of ms, got {ts!r}")
    return TraceRequest(
        arrival_s=ts / 1000.0,
        input_tokens=count(row["input_length"], "input_length"),
        output_tokens=count(row["output_length"], "output_length"),
        hash_ids=id_tuple(row["hash_ids"], interned),
        block_tokens=MOONCAKE_BLOCK_TOKENS,
    )
