"""kvgate's own traces: the JSONL that `kvgate serve --record FILE` writes (format version 1).

A header line, then one line per completed inference request (chat, completions, responses;
not embeddings), keys in any order, unknown keys ignored:

    {"kvgate_trace": 1, "started_at": "2025-06-01T12:00:00.000000+00:00", "block_tokens": 16,
     "chars_per_token": 4.0, "hash": "xxh3-64 chained, fixed blocks, keyed per recording"}
    {"t": 0.013, "model": "llama", "input_tokens": 812, "output_tokens": 95, "block_tokens":
     16, "hash_ids": [8461839501729273041, ...], "session": "chat-7", "ttft_s": 0.042}

`t` is seconds since `started_at` (lines come in completion order; the loader sorts them);
`hash_ids` are chained hashes of the prompt's full blocks, comparable within one recording
only; `ttft_s` the TTFT the gateway saw (streamed answers). Never any prompt or completion
text. A restarted gateway appends a new header (segments placed by `started_at`); a last line
cut short is ignored, any other bad line is an error. Fields: docs/architecture.md.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

import orjson

from routing.traces.files import open_trace
from routing.traces.request import TraceFormatError, TraceRequest, count, id_tuple, reason

FORMAT_VERSION = 1
HEADER_KEY = "kvgate_trace"
HASH_DESCRIPTION = "xxh3-64 chained, fixed blocks, keyed per recording"


def encode_header(started_at: datetime, block_tokens: int, chars_per_token: float) -> bytes:
    """The header line, newline included."""
    header = {
        HEADER_KEY: FORMAT_VERSION,
        "started_at": started_at.isoformat(),
        "block_tokens": block_tokens,
        "chars_per_token": chars_per_token,
        "hash": HASH_DESCRIPTION,
    }
    return orjson.dumps(header) + b"\n"


def encode_request(req: TraceRequest) -> bytes:
    """One request line, newline included; `req.arrival_s` is its `t`."""
    line = {
        "t": round(req.arrival_s, 6),
        "model": req.model,
        "input_tokens": req.input_tokens,
        "output_tokens": req.output_tokens,
        "block_tokens": req.block_tokens,
        "hash_ids": req.hash_ids,
        "session": req.session,
    }
    if req.ttft_s is not None:
        line["ttft_s"] = round(req.ttft_s, 6)
    return orjson.dumps(line) + b"\n"


def load_recorded(path: str | Path, limit: int | None = None) -> list[TraceRequest]:
    """The recording's requests in arrival order (the first `limit` of them)."""
    out: list[TraceRequest] = []
    interned: dict[int, int] = {}
    first: datetime | None = None
    offset, block_tokens = 0.0, 0
    with open_trace(path) as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = orjson.loads(line)
                if not isinstance(row, dict):
                    raise ValueError("expected a JSON object")
                if HEADER_KEY in row:
                    started, block_tokens = _header(row)
                    first = first or started
                    offset = (started - first).total_seconds()
                elif first is None:
                    raise ValueError(f"expected a header line with {HEADER_KEY!r} first")
                else:
                    out.append(_request(row, offset, block_tokens, interned))
            except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
                if not line.endswith(b"\n") and first is not None:
                    break  # the last line, cut short
                raise TraceFormatError(path, lineno, reason(exc)) from None
    if first is None:
        raise TraceFormatError(path, None, "empty: no kvgate trace header")
    out.sort(key=lambda r: r.arrival_s)
    return out if limit is None else out[:limit]


def _header(row: dict[str, Any]) -> tuple[datetime, int]:
    if row[HEADER_KEY] != FORMAT_VERSION:
        raise ValueError(f"unsupported kvgate trace version {row[HEADER_KEY]!r}")
    started = datetime.fromisoformat(row["started_at"])
    block_tokens = count(row["block_tokens"], "block_tokens")
    if block_tokens < 1:
        raise ValueError("block_tokens must be >= 1")
    return started, block_tokens


def _request(
    row: dict[str, Any], offset: float, default_block: int, interned: dict[int, int]
) -> TraceRequest:
    t = row["t"]
    if isinstance(t, bool) or not isinstance(t, int | float) or t < 0:
        raise ValueError(f"t must be a non-negative number of seconds, got {t!r}")
    model, session = row.get("model"), row.get("session")
    if model is not None and not isinstance(model, str):
        raise ValueError(f"model must be a string, got {model!r}")
    if session is not None and not isinstance(session, str):
        raise ValueError(f"session must be a string or null, got {session!r}")
    block_tokens = count(row.get("block_tokens", default_block), "block_tokens")
    if block_tokens < 1:
        raise ValueError("block_tokens must be >= 1")
    ttft = row.get("ttft_s")
    if ttft is not None and (isinstance(ttft, bool) or not isinstance(ttft, int | float)):
        raise ValueError(f"ttft_s must be a number of seconds or null, got {ttft!r}")
    return TraceRequest(
        arrival_s=offset + t,
        input_tokens=count(row["input_tokens"], "input_tokens"),
        output_tokens=count(row["output_tokens"], "output_tokens"),
        hash_ids=id_tuple(row["hash_ids"], interned),
        block_tokens=block_tokens,
        model=model,
        session=session,
        ttft_s=None if ttft is None else float(ttft),
    )
