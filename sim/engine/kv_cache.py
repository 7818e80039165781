"""Paged KV cache with automatic prefix caching, as vLLM v1's `BlockPool` keeps it.

`num_blocks` blocks of `block_size` tokens, shared by reference count (vLLM v1's `block_pool.py`):

- a *full* block is named by a chained hash `h_i = H(h_{i-1}, tokens of block i)` from
  `ROOT_HASH` (Python's `hash` of a tuple of ints, the same in every 64-bit CPython; vLLM uses
  sha256), entered in the cached-block map when committed full (`cache_block`); of several
  blocks with one hash, lookups return the first and the others stay findable;
- a block whose count drops to 0 keeps its hash at the *tail* of the free queue (`free` goes
  in reverse, so a request's tail blocks are evicted first); `allocate` pops the *head* and
  drops its hash (eviction); a hit on a free block takes it out of the queue (`touch`);
- usage is `1 − free / num_blocks`: cached blocks nobody uses count as free, as in vLLM.

A `KVEventLog` in `events` records each hash entering or leaving, and resets
(`sim.engine.kv_events`). Block-id runs kept for speed: docs/decisions/0014-simulator-speed.md.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from functools import partial
from itertools import compress, takewhile
from operator import is_not, not_
from typing import cast

from scoring.state.prefix_hash import common_prefix
from sim.engine.block_runs import (
    SHORT,
    Piece,
    canonical_ints,
    reversed_pieces,
    span,
    stretches,
)
from sim.engine.free_queue import FreeQueue, down, up
from sim.engine.kv_events import KVEventLog

BlockOrigin = tuple[Sequence[int], Sequence[int], int]
"""(tokens, block hashes, first block index) of the request whose blocks are committed."""

ROOT_HASH = 0
"""Parent hash of a sequence's first block."""

_is_not_none: Callable[[object], bool] = partial(is_not, None)
_is_zero: Callable[[int], bool] = not_


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


def _cut(block_ids: Sequence[int], pieces: list[Piece] | None) -> list[Piece]:
    """`pieces` if given (checked to cover `block_ids`), else the cut found by a scan."""
    if pieces is None:
        return stretches(block_ids)
    if (pieces[-1][1] if pieces else 0) != len(block_ids):
        raise ValueError("the pieces do not cover the block ids")
    return pieces


class PagedKVCache(FreeQueue):
    """Blocks, reference counts, the free queue and the hash → block map (see module doc)."""

    __slots__ = (
        "_by_hash",
        "_duplicates",
        "_hash",
        "_ints",
        "_num_free",
        "_ref",
        "block_size",
        "events",
        "num_blocks",
    )

    def __init__(self, num_blocks: int, block_size: int) -> None:
        if num_blocks < 1 or block_size < 1:
            raise ValueError("num_blocks and block_size must be positive")
        self.num_blocks = num_blocks
        self.block_size = block_size
        # Queue positions stay below 7 × num_blocks (see `allocate` and `free`).
        self._ints = canonical_ints(num_blocks + 1)
        self._ref = [0] * num_blocks
        self._hash: list[int | None] = [None] * num_blocks
        self._init_queue(self._ints[:num_blocks])
        self._num_free = num_blocks
        self._by_hash: dict[int, int] = {}
        # Further blocks with a hash already in _by_hash; rare, so kept out of the hot path.
        self._duplicates: dict[int, list[int]] = {}
        self.events: KVEventLog | None = None

    @property
    def num_free_blocks(self) -> int:
        """Blocks no request holds, cached or not."""
        return self._num_free

    @property
    def usage(self) -> float:
        return 1.0 - self._num_free / self.num_blocks

    @property
    def num_cached_blocks(self) -> int:
        """Blocks findable by hash (held or free): what the cache could serve."""
        return len(self._by_hash) + sum(map(len, self._duplicates.values()))

    def find_cached_prefix(self, block_hashes: Sequence[int]) -> int:
        """Number of leading `block_hashes` that are cached.

        The caller limits the hashes it passes: vLLM never serves a prompt's last token
        from the cache, so it looks up at most `(num_tokens - 1) // block_size` blocks.
        """
        return len(self.cached_blocks(block_hashes))

    def cached_blocks(self, block_hashes: Sequence[int]) -> list[int]:
        """Block ids of the longest cached prefix of `block_hashes` (not yet touched).

        A cached prefix mostly sits in runs of consecutive blocks: from a block found in
        the map, the blocks after it (or before it) that hold the next hashes are read off
        the per-block hashes, compared a slice at a time, instead of one lookup each.
        """
        get = self._by_hash.get
        ints = self._ints
        found: list[int] = []
        k, n = 0, len(block_hashes)
        while k < n:
            block = get(block_hashes[k])
            if block is None:
                return found
            m, step = self._held_run(block_hashes, k, block)
            if m < 2 * SHORT:
                break
            found += ints[block : block + m] if step > 0 else ints[block - m + 1 : block + 1][::-1]
            k += m
        found += takewhile(_is_not_none, cast("Iterable[int]", map(get, block_hashes[k:])))
        return found

    def _held_run(self, block_hashes: Sequence[int], k: int, block: int) -> tuple[int, int]:
        """(m, step): blocks block, block + step, … hold block_hashes[k : k + m], and each is
        the block the map gives for its hash (m = 0 if a duplicate might say otherwise)."""
        held = self._hash
        limit = min(len(block_hashes) - k, self.num_blocks - block)
        m = common_prefix(block_hashes, k, held, block, limit)
        step = 1
        n = len(block_hashes)
        if m < 2 * SHORT and block > 0 and k + 1 < n and held[block - 1] == block_hashes[k + 1]:
            limit = min(n - k, block + 1)
            down = held[block - limit + 1 : block + 1][::-1]
            m, step = common_prefix(block_hashes, k, down, 0, limit), -1
        if self._duplicates and not self._duplicates.keys().isdisjoint(block_hashes[k : k + m]):
            return 0, step
        return m, step

    def num_evictable(self, block_ids: Iterable[int]) -> int:
        """How many of `block_ids` sit in the free queue (touching them uses free space)."""
        return list(map(self._ref.__getitem__, block_ids)).count(0)

    def evictable(self, block_ids: Sequence[int]) -> list[int]:
        """Those of `block_ids` that sit in the free queue."""
        return list(compress(block_ids, map(_is_zero, map(self._ref.__getitem__, block_ids))))

    def touch(self, block_ids: Sequence[int]) -> list[Piece]:
        """Take a reference on cached blocks, removing unreferenced ones from the queue;
        returns the cut of `block_ids` into pieces."""
        ref = self._ref
        pieces = stretches(block_ids)
        for i, j, step in pieces:
            if step:
                lo, hi = span(block_ids, i, j, step)
                n = hi - lo
                counts = ref[lo:hi]
                free = counts.count(0)
                if free == n:
                    first = self._queued_together(lo, hi)
                    if first is not None:
                        self._queue[first : first + n] = [None] * n
                        self._tombs[first : first + n] = b"\x01" * n
                        ref[lo:hi] = [1] * n
                        self._num_free -= n
                        continue
                elif free == 0:
                    ref[lo:hi] = [c + 1 for c in counts]
                    continue
            self._touch_each(block_ids[i:j])
        return pieces

    def _touch_each(self, block_ids: Sequence[int]) -> None:
        ref = self._ref
        queue = self._queue
        pos = self._pos
        tombs = self._tombs
        taken = 0
        for block in block_ids:
            count = ref[block]
            if count == 0:
                at = pos[block]
                queue[at] = None
                tombs[at] = 1
                taken += 1
            ref[block] = count + 1
        self._num_free -= taken

    def allocate(self, count: int, commit: Sequence[int] = ()) -> list[int]:
        """Pop `count` blocks from the head of the free queue, evicting their hashes; then
        `cache_blocks` the first len(`commit`) of them under those hashes."""
        return self.allocate_runs(count, commit)[0]

    def allocate_runs(
        self, count: int, commit: Sequence[int] = (), origin: BlockOrigin | None = None
    ) -> tuple[list[int], list[Piece]]:
        """`allocate`, and the cut of the blocks it returns into pieces."""
        if count > self._num_free:
            raise ValueError(f"cannot allocate {count} blocks: {self._num_free} free")
        if len(commit) > count:
            raise ValueError("allocate: more hashes to commit than blocks")
        blocks, pieces = self._pop(count)
        ref = self._ref
        hashes = self._hash
        by_hash = self._by_hash
        for i, j, step in pieces:
            if step:
                lo, hi = span(blocks, i, j, step)
                n = hi - lo
                ref[lo:hi] = [1] * n
                cached = hashes[lo:hi]
                # Not `count(None)`: that reads every hash (an int elsewhere in memory),
                # while `!=` tests identity first and stops at the first held hash.
                if cached != [None] * n:
                    hashes[lo:hi] = [None] * n
                    if self._duplicates or self.events is not None:
                        self._evict(blocks[i:j], cached[::step])
                    else:  # `_evict` without duplicates: the order does not matter
                        for h in cached:
                            if h is not None:
                                del by_hash[h]
                continue
            stretch = blocks[i:j]
            evicted = []
            for block in stretch:
                ref[block] = 1
                evicted.append(hashes[block])
                hashes[block] = None
            self._evict(stretch, evicted)
        self._num_free -= count
        if commit:
            k = len(commit)
            prefix = [(i, min(j, k), step) for i, j, step in pieces if i < k]
            self._set_hashes(blocks, commit, prefix)
            fresh = self._index(blocks[:k], commit)
            if self.events is not None and origin is not None:
                tokens, all_hashes, start = origin
                self.events.stored(tokens, all_hashes, (start, start + k), fresh)
        if self._head > 4 * self.num_blocks:
            self._compact()
        return blocks, pieces

    def cache_block(self, block_id: int, block_hash: int) -> None:
        """Commit a full block under `block_hash` so later lookups can hit it."""
        self.cache_blocks((block_id,), (block_hash,))

    def cache_blocks(
        self,
        block_ids: Sequence[int],
        block_hashes: Sequence[int],
        pieces: list[Piece] | None = None,
        origin: BlockOrigin | None = None,
    ) -> None:
        """`cache_block` for each pair, in order (`pieces`: the cut of `block_ids`, if known;
        `origin`: where they come from, for the events)."""
        if len(block_ids) != len(block_hashes):
            raise ValueError("cache_blocks: as many hashes as blocks are needed")
        hashes = self._hash
        pieces = _cut(block_ids, pieces)
        for i, j, step in pieces:
            if step:
                lo, hi = span(block_ids, i, j, step)
                if hashes[lo:hi].count(None) == hi - lo:
                    continue
            taken = next((b for b in block_ids[i:j] if hashes[b] is not None), None)
            if taken is not None:
                raise ValueError(f"block {taken} is already cached")
        self._set_hashes(block_ids, block_hashes, pieces)
        fresh = self._index(block_ids, block_hashes)
        if self.events is not None and origin is not None:
            tokens, all_hashes, start = origin
            self.events.stored(tokens, all_hashes, (start, start + len(block_ids)), fresh)

    def _set_hashes(
        self,
        block_ids: Sequence[int],
        block_hashes: Sequence[int],
        pieces: list[Piece],
    ) -> None:
        hashes = self._hash
        for i, j, step in pieces:
            if step:
                lo, hi = span(block_ids, i, j, step)
                hashes[lo:hi] = block_hashes[i:j][::step]
            else:
                for block, h in zip(block_ids[i:j], block_hashes[i:j], strict=True):
                    hashes[block] = h

    def _index(self, block_ids: Sequence[int], block_hashes: Sequence[int]) -> list[bool] | None:
        """Enter committed blocks in the hash map (a hash already there: a duplicate);
        returns which entered it (None: all did)."""
        by_hash = self._by_hash
        size = len(by_hash)
        # Optimistic: the hashes are almost always new, and then one pass does it all (the
        # map is large and its probes miss the CPU caches, so a second pass would cost).
        by_hash.update(zip(block_hashes, block_ids, strict=True))
        if len(by_hash) - size == len(block_hashes):
            return None
        self._undo_update(block_ids, block_hashes)
        duplicates = self._duplicates
        fresh = []
        for block, h in zip(block_ids, block_hashes, strict=True):
            if h in by_hash:
                duplicates.setdefault(h, []).append(block)
                fresh.append(False)
            else:
                by_hash[h] = block
                fresh.append(True)
        return fresh

    def _undo_update(self, block_ids: Sequence[int], block_hashes: Sequence[int]) -> None:
        """Take `block_hashes` out of the map again after an update found some of them
        there (or met one twice), putting back what the update overwrote: for a hash that
        was there, the one block carrying it that is neither in this batch nor among the
        hash's duplicates. Rare (concurrent computation of a prefix), so a full scan."""
        by_hash = self._by_hash
        duplicates = self._duplicates
        keys = set(block_hashes)
        for h in keys:
            del by_hash[h]
        batch = set(block_ids)
        for block, held in enumerate(self._hash):
            if held is None or held not in keys or block in batch:
                continue
            if block not in duplicates.get(held, ()):
                by_hash[held] = block

    def free(self, block_ids: Sequence[int], pieces: list[Piece] | None = None) -> None:
        """Drop one reference on each block, in reverse order (tail blocks evicted first).
        `pieces`: the cut of `block_ids`, if known."""
        ref = self._ref
        pos = self._pos
        if len(self._queue) > 6 * self.num_blocks:
            self._compact()  # keeps positions below 7 × num_blocks
        queue = self._queue
        queued = self._pieces
        start = len(queue)
        order = block_ids[::-1]
        cut = reversed_pieces(_cut(block_ids, pieces), len(order))
        for i, j, step in cut:
            at = len(queue)
            if step:
                lo, hi = span(order, i, j, step)
                n = hi - lo
                if ref[lo:hi].count(1) == n:
                    ref[lo:hi] = [0] * n
                    queue += order[i:j]
                    pos[lo:hi] = up(at, n) if step > 0 else down(at, n)
                    queued.append((at, at + n, step))
                    continue
            index = at
            for block in order[i:j]:
                count = ref[block] - 1
                ref[block] = count
                if count == 0:
                    queue.append(block)
                    pos[block] = index
                    index += 1
            if index > at:
                self._queue_pieces(at, index, step)
        self._num_free += len(queue) - start

    def ref_count(self, block_id: int) -> int:
        return self._ref[block_id]

    def is_cached(self, block_hash: int) -> bool:
        return block_hash in self._by_hash

    def cached_hashes(self) -> list[int]:
        """Every hash the cache can serve (held or free), each once; O(cached blocks)."""
        return list(self._by_hash)

    def reset_prefix_cache(self) -> bool:
        """Forget every cached hash, as vLLM's `reset_prefix_cache`: only when no request
        holds a block (False, and nothing changes, otherwise)."""
        if self._num_free != self.num_blocks:
            return False
        self._hash = [None] * self.num_blocks
        self._by_hash.clear()
        self._duplicates.clear()
        if self.events is not None:
            self.events.cleared()
        return True

    def _evict(self, blocks: Sequence[int], hashes: Sequence[int | None]) -> None:
        """Drop the hashes of blocks just popped (None: the block held no hash), in order."""
        by_hash = self._by_hash
        duplicates = self._duplicates
        events = self.events
        if not duplicates and events is None:
            for h in hashes:
                if h is not None:
                    del by_hash[h]
            return
        for block, h in zip(blocks, hashes, strict=True):
            if h is None:
                continue
            if h in duplicates:
                self._evict_duplicate(block, h)  # another block still carries h
            else:
                del by_hash[h]
                if events is not None:
                    events.removed(h)

    def _evict_duplicate(self, block: int, block_hash: int) -> None:
        by_hash = self._by_hash
        others = self._duplicates[block_hash]
        if by_hash.get(block_hash) == block:
            by_hash[block_hash] = others.pop(0)
        else:
            others.remove(block)
        if not others:
            del self._duplicates[block_hash]
