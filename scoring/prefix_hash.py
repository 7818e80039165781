"""Chained prefix-block hashes of a prompt, as the prefix index keys them.

The canonical prompt bytes are cut into blocks and hashed as a chain with xxHash3-64:

    h_0 = xxh3_64(block_0, seed = xxh3_64(model ‖ 0x00 ‖ cache_salt))
    h_i = xxh3_64(block_i, seed = h_{i−1})

so a block's hash names the whole prefix up to it, and requests for another model or with
another `cache_salt` never share a hash. Only full blocks are hashed (engines only cache
full blocks).

Block sizes grow with position so that hashing stays cheap for very long prompts: the first
`GROUP` (128) blocks have `block_chars` bytes, the next 128 twice that, then four times, and
so on. Boundaries depend only on position, so two prompts sharing a prefix share its blocks;
a 128k-token prompt (~512 KB) makes ~770 blocks instead of 8,000, and the far end of a long
context is tracked more coarsely, where the exact match length matters least.
`hash_fixed_blocks` is the same chain without the growth, for recorded traces.
"""

from __future__ import annotations

from bisect import bisect_right
from functools import lru_cache

import xxhash

GROUP = 128
_GROUPS = 32  # block-size doublings precomputed: 128 × block_chars × (2^32 − 1) bytes

_xxh3 = xxhash.xxh3_64_intdigest


def prefix_seed(model: str, cache_salt: str | None = None) -> int:
    return _xxh3(model.encode() + b"\x00" + (cache_salt or "").encode())


def hash_blocks(data: bytes, seed: int, block_chars: int) -> tuple[int, ...]:
    """Chained hashes of the full blocks of `data` (see the module docstring)."""
    slices, ends = _layout(block_chars)
    count = bisect_right(ends, len(data))
    if count == len(ends):  # beyond the precomputed layout (over ~0.5 TB): never in practice
        raise ValueError("prompt too long to hash")
    h = seed
    # One comprehension over precomputed slices: the chain is the only per-block Python work.
    return tuple([h := _xxh3(data[s], h) for s in slices[:count]])


@lru_cache(maxsize=8)
def _layout(block_chars: int) -> tuple[list[slice], list[int]]:
    """Every block's byte range and end offset for this base block size, computed once."""
    if block_chars < 1:
        raise ValueError("block_chars must be >= 1")
    slices: list[slice] = []
    ends: list[int] = []
    pos = 0
    for group in range(_GROUPS):
        size = block_chars << group
        for _ in range(GROUP):
            slices.append(slice(pos, pos + size))
            pos += size
            ends.append(pos)
    return slices, ends


def hash_fixed_blocks(data: bytes, seed: int, block_chars: int) -> tuple[int, ...]:
    """Chained hashes of the full blocks of `data`, all `block_chars` bytes (no growth): the
    same chain as `hash_blocks` for the first GROUP blocks, then one hash per base block.
    For recorded traces, whose block ids must all stand for the same number of tokens."""
    if block_chars < 1:
        raise ValueError("block_chars must be >= 1")
    h = seed
    return tuple(
        [
            h := _xxh3(data[pos : pos + block_chars], h)
            for pos in range(0, len(data) - block_chars + 1, block_chars)
        ]
    )


def block_weight(index: int) -> int:
    """Size of block `index` in units of the base block (1 for the first GROUP, then 2, 4…)."""
    return 1 << (index // GROUP)


def covered_chars(blocks: int, block_chars: int) -> int:
    """Bytes covered by the first `blocks` blocks."""
    full_groups, rest = divmod(blocks, GROUP)
    # Σ_{g<full_groups} GROUP × block_chars × 2^g  +  rest × block_chars × 2^full_groups
    return block_chars * (GROUP * ((1 << full_groups) - 1) + rest * (1 << full_groups))
