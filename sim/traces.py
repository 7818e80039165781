"""Recorded request traces: loading, and synthesising prompts from their block hash ids.

Mooncake's JSONL format (FAST'25 release): one request a line with `timestamp` (ms from the
start), `input_length` and `output_length` (tokens), and `hash_ids`, one id per 512-token
block of the prompt; requests sharing a block id share that block's tokens (and, since ids
are chained, everything before it).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import orjson

MOONCAKE_BLOCK_TOKENS = 512
_VOCAB_BASE, _VOCAB_SPAN = 1000, 30000


@dataclass(frozen=True, slots=True)
class TraceRequest:
    """One request of a trace. `hash_ids[i]` names the prompt prefix up to the end of block i
    (blocks of `block_tokens` tokens; the last may be partial), as Mooncake's ids do."""

    arrival_s: float
    input_tokens: int
    output_tokens: int
    hash_ids: tuple[int, ...]
    block_tokens: int = MOONCAKE_BLOCK_TOKENS
    model: str | None = None
    session: str | None = None


def load_mooncake(path: str | Path, limit: int | None = None) -> list[TraceRequest]:
    out = []
    with Path(path).open("rb") as f:
        for n, line in enumerate(f):
            if limit is not None and n >= limit:
                break
            row = orjson.loads(line)
            out.append(
                TraceRequest(
                    arrival_s=row["timestamp"] / 1000.0,
                    input_tokens=int(row["input_length"]),
                    output_tokens=int(row["output_length"]),
                    hash_ids=tuple(int(h) for h in row["hash_ids"]),
                )
            )
    return out


def block_token_ids(hash_id: int, block_tokens: int = MOONCAKE_BLOCK_TOKENS) -> Iterator[int]:
    """The deterministic tokens of one trace block: same id, same tokens, everywhere."""
    x = (hash_id * 2654435761 + 97) & 0xFFFFFFFF
    for _ in range(block_tokens):
        x = (x * 1103515245 + 12345) & 0x7FFFFFFF
        yield _VOCAB_BASE + x % _VOCAB_SPAN


def prompt_token_ids(req: TraceRequest, block_tokens: int = MOONCAKE_BLOCK_TOKENS) -> list[int]:
    """The request's prompt as token ids: its blocks' tokens, cut to `input_tokens`."""
    ids: list[int] = []
    for h in req.hash_ids:
        ids.extend(block_token_ids(h, block_tokens))
        if len(ids) >= req.input_tokens:
            break
    return ids[: req.input_tokens]


def time_scaled(requests: list[TraceRequest], factor: float) -> list[TraceRequest]:
    """Replay `factor` times faster (arrival times divided by `factor`), from t = 0."""
    if not requests:
        return []
    t0 = requests[0].arrival_s
    return [replace(r, arrival_s=(r.arrival_s - t0) / factor) for r in requests]
