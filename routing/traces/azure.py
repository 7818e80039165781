"""Azure's LLM inference traces (2023, Splitwise; the 2024 week-long ones share the format).

CSV with the header `TIMESTAMP,ContextTokens,GeneratedTokens`; TIMESTAMP is an absolute
wall-clock time with 7 fractional digits (`2023-11-16 18:17:03.9799600`). No prefix or
session information: arrivals and lengths only, so every request gets `hash_ids = ()`.
Arrivals are measured from the earliest row (the first one: the files are in time order).
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from routing.traces.files import open_trace
from routing.traces.request import TraceFormatError, TraceRequest

HEADER = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")


def load_azure(path: str | Path, limit: int | None = None) -> list[TraceRequest]:
    rows: list[tuple[datetime, int, int]] = []
    with open_trace(path) as f:
        header = _text(f.readline(), path, 1).strip().lstrip("\ufeff")
        if tuple(c.strip() for c in header.split(",")) != HEADER:
            raise TraceFormatError(path, 1, f"expected the header {','.join(HEADER)!r}")
        for lineno, raw in enumerate(f, 2):
            if limit is not None and len(rows) >= limit:
                break
            line = _text(raw, path, lineno)
            if not line.strip():
                continue
            try:
                rows.append(_parse(line))
            except ValueError as exc:
                raise TraceFormatError(path, lineno, str(exc)) from None
    if not rows:
        return []
    t0 = min(r[0] for r in rows)
    return [
        TraceRequest(
            arrival_s=(ts - t0).total_seconds(), input_tokens=ctx, output_tokens=gen, hash_ids=()
        )
        for ts, ctx, gen in rows
    ]


def _text(raw: bytes, path: str | Path, lineno: int) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TraceFormatError(path, lineno, f"not UTF-8: {exc}") from None


def _parse(line: str) -> tuple[datetime, int, int]:
    fields = line.strip().split(",")
    if len(fields) != 3:
        raise ValueError(f"expected 3 comma-separated fields, got {len(fields)}")
    stamp, ctx, gen = (f.strip() for f in fields)
    return _timestamp(stamp), _tokens(ctx, "ContextTokens"), _tokens(gen, "GeneratedTokens")


def _timestamp(stamp: str) -> datetime:
    # datetime parses at most 6 fractional digits; the traces have 7 (100 ns ticks).
    head, dot, frac = stamp.partition(".")
    try:
        return datetime.fromisoformat(head + dot + frac[:6] if dot else head)
    except ValueError:
        raise ValueError(f"TIMESTAMP {stamp!r} is not an ISO date and time") from None


def _tokens(text: str, name: str) -> int:
    if not text.isdigit():
        raise ValueError(f"{name} must be a non-negative integer, got {text!r}")
    return int(text)
