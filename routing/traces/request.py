"""The unit of every trace: one request, as arrivals, lengths and prefix block ids."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import orjson

MOONCAKE_BLOCK_TOKENS = 512


@dataclass(frozen=True, slots=True)
class TraceRequest:
    """One request of a trace.

    `hash_ids[i]` names the prompt prefix up to the end of block i (blocks of `block_tokens`
    tokens), as Mooncake's ids do: an equal id at position i means an identical prefix of
    i + 1 blocks. Mooncake and the synthetic generators give the last, partial block an id
    too (`len(hash_ids) == ceil(input_tokens / block_tokens)`); kvgate recordings id full
    blocks only. Tokens past the last id are the request's own. Azure traces have no ids.
    """

    arrival_s: float  # from the start of the trace
    input_tokens: int
    output_tokens: int
    hash_ids: tuple[int, ...]
    block_tokens: int = MOONCAKE_BLOCK_TOKENS
    model: str | None = None
    session: str | None = None
    ttft_s: float | None = None  # as observed live (kvgate recordings only)


class TraceFormatError(ValueError):
    """A trace file is malformed; the message names the file and the line."""

    def __init__(self, path: str | Path, line: int | None, message: str) -> None:
        where = f"{path}:{line}" if line is not None else str(path)
        super().__init__(f"{where}: {message}")
        self.path = str(path)
        self.line = line


def count(value: object, name: str) -> int:
    """A non-negative integer field (bools rejected: JSON `true` is not a length)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{name} must be a non-negative integer, got {value!r}")
    return value


def id_tuple(value: object, interned: dict[int, int]) -> tuple[int, ...]:
    """Hash ids as a tuple, each id object shared with its earlier occurrences (a trace
    repeats its ids a lot; one int object per distinct id keeps memory down)."""
    if not isinstance(value, list) or not set(map(type, value)) <= {int}:
        raise ValueError(f"hash_ids must be a list of integers, got {value!r:.80}")
    return tuple(map(interned.setdefault, value, value))


def reason(exc: Exception) -> str:
    """What was wrong with a line, from the error its parsing raised."""
    if isinstance(exc, KeyError):
        return f"missing field {exc.args[0]!r}"
    if isinstance(exc, orjson.JSONDecodeError):
        return f"invalid JSON: {exc}"
    return str(exc)
