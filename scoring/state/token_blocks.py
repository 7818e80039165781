"""Chained keys of a prompt's token blocks, as the precise index keys an engine's cache.

An engine caches a prompt in blocks of `block_size` token ids; kvgate names each full block by
a chain over the ids themselves:

    k_0 = xxh3_64(ids_0, seed = root)        root = prefix_seed(model or LoRA adapter name)
    k_i = xxh3_64(ids_i, seed = k_{i−1})

with each block's ids packed as little-endian unsigned 32-bit ints. The same function keys a
request's prompt (token ids from the model's tokenizer and chat template) and the blocks an
engine reports in its KV-cache events (their `token_ids`, chained from the parent block's
key), so the two meet without reproducing the engine's own hash (vLLM's is a chained SHA-256
of pickled tuples). Only full blocks get a key: engines only cache full blocks.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from functools import lru_cache

import xxhash

from scoring.state.prefix_hash import prefix_seed

_xxh3 = xxhash.xxh3_64_intdigest


def root_key(model: str) -> int:
    """The chain's seed for a model or LoRA adapter (the parent of every first block)."""
    return prefix_seed(model)


def token_block_keys(token_ids: Sequence[int], block_size: int, parent: int) -> tuple[int, ...]:
    """Keys of the full `block_size`-token blocks of `token_ids`, chained from `parent` (the
    key of the block before them, or `root_key(model)` for a prompt's first block)."""
    if block_size < 1:
        raise ValueError("block_size must be >= 1")
    count = len(token_ids) // block_size
    if not count:
        return ()
    data = _packer(block_size * count).pack(*token_ids[: block_size * count])
    step = 4 * block_size
    h = parent
    return tuple([h := _xxh3(data[i : i + step], h) for i in range(0, len(data), step)])


@lru_cache(maxsize=256)
def _packer(count: int) -> struct.Struct:
    return struct.Struct(f"<{count}I")
