"""Synthesising prompts from block ids: same id, same tokens, so shared ids share a prefix.

Tokens past a request's last id (a kvgate recording ids full blocks only; an Azure trace has
no ids) are its own: drawn from a stream seeded by the request, unlike any block's.
"""

from __future__ import annotations

from collections.abc import Iterator

import xxhash

from routing.traces.request import TraceRequest

_VOCAB_BASE, _VOCAB_SPAN = 1000, 30000


def block_token_ids(hash_id: int, block_tokens: int) -> Iterator[int]:
    """The deterministic tokens of one trace block: same id, same tokens, everywhere."""
    x = (hash_id * 2654435761 + 97) & 0xFFFFFFFF
    for _ in range(block_tokens):
        x = (x * 1103515245 + 12345) & 0x7FFFFFFF
        yield _VOCAB_BASE + x % _VOCAB_SPAN


def prompt_token_ids(req: TraceRequest, block_tokens: int | None = None) -> list[int]:
    """The request's prompt as `input_tokens` token ids: its blocks' tokens (blocks of
    `block_tokens`, by default the request's own), then tokens of its own."""
    size = block_tokens or req.block_tokens
    ids: list[int] = []
    for h in req.hash_ids:
        if len(ids) >= req.input_tokens:
            break
        ids.extend(block_token_ids(h, size))
    if len(ids) < req.input_tokens:
        ids.extend(_own_tokens(req, req.input_tokens - len(ids)))
    return ids[: req.input_tokens]


def _own_tokens(req: TraceRequest, n: int) -> Iterator[int]:
    key = f"{req.arrival_s!r}|{req.input_tokens}|{req.session}|{req.hash_ids[-1:]}"
    return block_token_ids(xxhash.xxh3_64_intdigest(key.encode()), n)
