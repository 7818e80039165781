"""Chained prefix-block hashes of a prompt, as the prefix index keys them.

The canonical prompt bytes are cut into blocks and hashed as a chain with xxHash3-64:

    h_0 = xxh3_64(block_0, seed = xxh3_64(model ‖ 0x00 ‖ cache_salt))
    h_i = xxh3_64(block_i, seed = h_{i−1})

so a block's hash names the whole prefix up to it, and another model or `cache_salt` never
shares a hash. Only full blocks are hashed (engines only cache full blocks). Block sizes grow
with position: the first `GROUP` (128) blocks have `block_chars` bytes, the next 128 twice
that, then four times, and so on. Boundaries depend only on position, so prompts sharing a
prefix share its blocks; a 128k-token prompt makes ~770 blocks instead of 8,000, tracking the
far end of a long context, where the exact match length matters least, more coarsely.
`hash_fixed_blocks` is the same chain without the growth, for recorded traces. Both are
compiled (`prefix_hash_native`) where the install could build it, these functions otherwise.
"""

from __future__ import annotations

import struct
from bisect import bisect_right
from collections.abc import Callable, Sequence
from functools import lru_cache
from itertools import accumulate
from typing import TypeVar

import xxhash

GROUP = 128
_GROUPS = 32  # block-size doublings precomputed: 128 × block_chars × (2^32 − 1) bytes

_xxh3 = xxhash.xxh3_64_intdigest


def prefix_seed(model: str, cache_salt: str | None = None) -> int:
    return _xxh3(model.encode() + b"\x00" + (cache_salt or "").encode())


def hash_blocks_reference(data: bytes, seed: int, block_chars: int) -> tuple[int, ...]:
    """Chained hashes of the full blocks of `data` (see the module docstring): `hash_blocks`
    in Python, the reference of the compiled one."""
    ends = _block_ends(block_chars)
    count = bisect_right(ends, len(data))
    if count == len(ends):  # beyond the precomputed layout (over ~0.5 TB): never in practice
        raise ValueError("prompt too long to hash")
    full, rest = divmod(count, GROUP)
    blocks: list[bytes] = []
    pos = 0
    for group in range(full):
        size = block_chars << group
        blocks += _splitter(size, GROUP).unpack_from(data, pos)
        pos += size * GROUP
    if rest:
        blocks += _splitter(block_chars << full, rest).unpack_from(data, pos)
    h = seed
    # One comprehension over the split blocks: the chain is the only per-block Python work.
    return tuple([h := _xxh3(b, h) for b in blocks])


@lru_cache(maxsize=8)
def _block_ends(block_chars: int) -> tuple[int, ...]:
    """Every block's end offset for this base block size, computed once."""
    if block_chars < 1:
        raise ValueError("block_chars must be >= 1")
    return tuple(accumulate(block_chars << (i // GROUP) for i in range(GROUP * _GROUPS)))


# Cuts `count` consecutive `size`-byte blocks in one C call, ~4× cheaper than as many
# `data[a:b]` slices in Python, which were most of the cost of hashing a prompt. Keys are
# (block size, GROUP) plus each partial-group count met; an entry is at most ~5 KB.
@lru_cache(maxsize=1024)
def _splitter(size: int, count: int) -> struct.Struct:
    return struct.Struct(f"{size}s" * count)


def hash_fixed_blocks_reference(data: bytes, seed: int, block_chars: int) -> tuple[int, ...]:
    """Chained hashes of the full blocks of `data`, all `block_chars` bytes (no growth): the
    same chain as `hash_blocks` for the first GROUP blocks, then one hash per base block.
    For recorded traces, whose block ids must all stand for the same number of tokens."""
    if block_chars < 1:
        raise ValueError("block_chars must be >= 1")
    full, rest = divmod(len(data) // block_chars, GROUP)
    step = block_chars * GROUP
    split = _splitter(block_chars, GROUP)
    hashes: list[int] = []
    h = seed
    # Hashed GROUP blocks at a time rather than after splitting all of them: a 128k-token
    # prompt makes 8,000 blocks of 64 bytes, and holding them all at once was slower than
    # slicing them one by one.
    for pos in range(0, full * step, step):
        hashes += [h := _xxh3(b, h) for b in split.unpack_from(data, pos)]
    if rest:
        tail = _splitter(block_chars, rest).unpack_from(data, full * step)
        hashes += [h := _xxh3(b, h) for b in tail]
    return tuple(hashes)


_N = TypeVar("_N", tuple[int, ...], tuple[float, ...], list[int], list[float], set[int])


def _as_is(numbers: _N) -> _N:
    return numbers


def common_prefix_reference(
    a: Sequence[int | None], i: int, b: Sequence[int | None], j: int, limit: int
) -> int:
    """How many of a[i], a[i + 1], … equal b[j], b[j + 1], … (at most `limit`, which must not
    reach past either's end): slices of doubling length compared in C, then a bisection of the last
    one. The reference for `prefix_hash_native.common_prefix`."""
    if i < 0 or j < 0 or limit < 0 or i + limit > len(a) or j + limit > len(b):
        raise IndexError("a start or limit out of range")
    good, size = 0, 16
    while good < limit:
        size = min(size, limit - good)
        if a[i + good : i + good + size] != b[j + good : j + good + size]:
            break
        good += size
        size *= 2
    else:
        return good
    bad = good + size  # a[i + bad − 1] and b[j + bad − 1] differ somewhere before
    while bad - good > 1:
        mid = (good + bad) // 2
        if a[i + good : i + mid] == b[j + good : j + mid]:
            good = mid
        else:
            bad = mid
    return good


Chain = Callable[[bytes, int, int], tuple[int, ...]]
hash_blocks: Chain = hash_blocks_reference
hash_fixed_blocks: Chain = hash_fixed_blocks_reference
# For tuples, lists and sets of numbers the routing state keeps a while (the prefix index's
# runs, the LRU tails): compiled, it takes them out of the cyclic collector, which would
# otherwise look at each of their items at every pass (they can hold no cycle); a no-op here.
untracked = _as_is
common_prefix = common_prefix_reference
try:  # the compiled chain (setup.py), the same hashes ~4x faster, where it was built
    from scoring.state import prefix_hash_native
except ImportError:  # no C compiler or no xxhash.h at install: the references run
    pass
else:
    hash_blocks = prefix_hash_native.hash_blocks
    hash_fixed_blocks = prefix_hash_native.hash_fixed_blocks
    untracked = prefix_hash_native.untracked
    common_prefix = prefix_hash_native.common_prefix


def block_weight(index: int) -> int:
    """Size of block `index` in units of the base block (1 for the first GROUP, then 2, 4…)."""
    return 1 << (index // GROUP)


def blocks_covered_by(base_blocks: int) -> int:
    """How many leading blocks lie entirely within the first `base_blocks` base-size blocks:
    the inverse of `covered_chars` (in units of the base block)."""
    count, size = 0, 1
    while True:
        take = min(GROUP, base_blocks // size)
        count += take
        base_blocks -= take * size
        if take < GROUP:
            return count
        size *= 2


def covered_chars(blocks: int, block_chars: int) -> int:
    """Bytes covered by the first `blocks` blocks."""
    full_groups, rest = divmod(blocks, GROUP)
    # Σ_{g<full_groups} GROUP × block_chars × 2^g  +  rest × block_chars × 2^full_groups
    return block_chars * (GROUP * ((1 << full_groups) - 1) + rest * (1 << full_groups))
