"""Paged KV cache with automatic prefix caching, as vLLM v1's `BlockPool` keeps it.

The cache is `num_blocks` blocks of `block_size` token slots. A request holds a list of
blocks; a block can be shared by several requests (a reference count).

Prefix caching (vLLM v1, `vllm/v1/core/block_pool.py`, `kv_cache_utils.py`):

- A *full* block is identified by a chained hash `h_i = H(h_{i-1}, tokens of block i)`, so
  the same tokens under a different prefix give a different hash. The first block chains
  from `ROOT_HASH`. vLLM uses sha256 over pickled values; the model uses Python's `hash` of a
  tuple of ints, which is fast and, unlike `hash(str)`, does not depend on PYTHONHASHSEED:
  the same tokens give the same hash in every process (on a 64-bit CPython).
- A block is entered in the cached-block map when it is committed full (`cache_block`). More
  than one block may carry the same hash (two requests computed it at once); lookups return
  the first, and the others stay findable when it goes.
- A block whose reference count drops to 0 is not erased: it goes to the *tail* of the free
  queue with its hash, and stays a cache hit until it is reused. `free` releases a request's
  blocks in reverse order, so its tail blocks sit nearer the head and are evicted first.
- `allocate` pops blocks from the *head* of the free queue (least recently freed first) and
  drops a popped block's hash from the map: that is eviction.
- A hit on a block with reference count 0 takes it out of the free queue (`touch`).
- Usage is `1 − free / num_blocks`: cached blocks nobody uses count as free, as in vLLM's
  `vllm:kv_cache_usage_perc` (vLLM's reserved null block is not modelled).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Sequence

ROOT_HASH = 0
"""Parent hash of a sequence's first block."""


def hash_block(parent_hash: int, block_tokens: tuple[int, ...]) -> int:
    """Chained hash of one full block: deterministic across processes for int tokens."""
    return hash((parent_hash, block_tokens))


def chain_block_hashes(tokens: Sequence[int], block_size: int) -> list[int]:
    """Hashes of every full block of `tokens`, each chained from the one before."""
    as_tuple = tokens if isinstance(tokens, tuple) else tuple(tokens)
    hashes: list[int] = []
    parent = ROOT_HASH
    for end in range(block_size, len(as_tuple) + 1, block_size):
        parent = hash((parent, as_tuple[end - block_size : end]))  # = hash_block, inlined
        hashes.append(parent)
    return hashes


class PagedKVCache:
    """Blocks, reference counts, the free queue and the hash → block map (see module doc)."""

    __slots__ = (
        "_block_hash",
        "_by_hash",
        "_duplicates",
        "_free",
        "_ref",
        "block_size",
        "num_blocks",
    )

    def __init__(self, num_blocks: int, block_size: int) -> None:
        if num_blocks < 1 or block_size < 1:
            raise ValueError("num_blocks and block_size must be positive")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self._ref = [0] * num_blocks
        self._block_hash: list[int | None] = [None] * num_blocks
        # Insertion order is the eviction order: head = next block to reuse.
        self._free: OrderedDict[int, None] = OrderedDict.fromkeys(range(num_blocks))
        self._by_hash: dict[int, int] = {}
        # Further blocks with a hash already in _by_hash; rare, so kept out of the hot path.
        self._duplicates: dict[int, list[int]] = {}

    @property
    def num_free_blocks(self) -> int:
        """Blocks no request holds, cached or not."""
        return len(self._free)

    @property
    def usage(self) -> float:
        return 1.0 - len(self._free) / self.num_blocks

    def find_cached_prefix(self, block_hashes: Sequence[int]) -> int:
        """Number of leading `block_hashes` that are cached.

        The caller limits the hashes it passes: vLLM never serves a prompt's last token
        from the cache, so it looks up at most `(num_tokens - 1) // block_size` blocks.
        """
        by_hash = self._by_hash
        for count, block_hash in enumerate(block_hashes):
            if block_hash not in by_hash:
                return count
        return len(block_hashes)

    def cached_blocks(self, block_hashes: Sequence[int]) -> list[int]:
        """Block ids of the longest cached prefix of `block_hashes` (not yet touched)."""
        by_hash = self._by_hash
        blocks: list[int] = []
        for block_hash in block_hashes:
            block = by_hash.get(block_hash)
            if block is None:
                break
            blocks.append(block)
        return blocks

    def num_evictable(self, block_ids: Iterable[int]) -> int:
        """How many of `block_ids` sit in the free queue (touching them uses free space)."""
        ref = self._ref
        return sum(1 for block in block_ids if ref[block] == 0)

    def touch(self, block_ids: Iterable[int]) -> None:
        """Take a reference on cached blocks, removing unreferenced ones from the queue."""
        ref = self._ref
        free = self._free
        for block in block_ids:
            if ref[block] == 0:
                del free[block]
            ref[block] += 1

    def allocate(self, count: int) -> list[int]:
        """Pop `count` blocks from the head of the free queue, evicting their hashes."""
        if count > len(self._free):
            raise ValueError(f"cannot allocate {count} blocks: {len(self._free)} free")
        free = self._free
        ref = self._ref
        block_hash = self._block_hash
        blocks: list[int] = []
        for _ in range(count):
            block, _none = free.popitem(last=False)
            if block_hash[block] is not None:
                self._evict(block)
            ref[block] = 1
            blocks.append(block)
        return blocks

    def cache_block(self, block_id: int, block_hash: int) -> None:
        """Commit a full block under `block_hash` so later lookups can hit it."""
        if self._block_hash[block_id] is not None:
            raise ValueError(f"block {block_id} is already cached")
        self._block_hash[block_id] = block_hash
        if block_hash in self._by_hash:
            self._duplicates.setdefault(block_hash, []).append(block_id)
        else:
            self._by_hash[block_hash] = block_id

    def free(self, block_ids: Sequence[int]) -> None:
        """Drop one reference on each block, in reverse order (tail blocks evicted first)."""
        ref = self._ref
        free = self._free
        for block in reversed(block_ids):
            ref[block] -= 1
            if ref[block] == 0:
                free[block] = None

    def ref_count(self, block_id: int) -> int:
        return self._ref[block_id]

    def is_cached(self, block_hash: int) -> bool:
        return block_hash in self._by_hash

    def eviction_order(self) -> list[int]:
        """Free block ids, next to be reused first (for tests and reports; O(num_blocks))."""
        return list(self._free)

    def _evict(self, block: int) -> None:
        block_hash = self._block_hash[block]
        assert block_hash is not None
        self._block_hash[block] = None
        others = self._duplicates.get(block_hash)
        if self._by_hash.get(block_hash) == block:
            if others:
                self._by_hash[block_hash] = others.pop(0)
            else:
                del self._by_hash[block_hash]
        elif others is not None:
            others.remove(block)
        if others is not None and not others:
            del self._duplicates[block_hash]
