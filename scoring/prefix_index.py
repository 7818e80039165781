"""Which prompt-prefix blocks each replica probably holds in its KV cache.

A data structure, not a plugin: the gateway (and the simulator) feed it from routing
decisions — every block of a request is recorded for the replica it was sent to — and the
prefix scorer reads it. Per replica the blocks live in an LRU bounded by that replica's KV
capacity (in base blocks, see `scoring.prefix_hash.block_weight`), so the index forgets
roughly when the engine does. A global map from block hash to the replicas holding it makes a
match cost O(matched blocks), whatever the number of replicas.

A request's blocks are touched tail first, so its head blocks are the most recently used and
evicted last: what remains of a prefix is always its beginning, as in vLLM's free queue.

Memory on CPython 3.11: about 360 bytes per block held by one replica (its 64-bit int, an
OrderedDict entry, a hash → holders entry and a ~216-byte set), about 215 bytes per
(block, replica) pair when two replicas share the block (up to ~410 and ~260 depending on
how full the hash tables are); `tests/unit/scoring/test_prefix_index.py` measures it.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Sequence

from scoring.prefix_hash import block_weight

DEFAULT_CAPACITY_BLOCKS = 31_250  # GIE's per-pod default LRU size


class PrefixIndex:
    """Per-replica LRU of block hashes, plus hash → replicas for matching."""

    def __init__(self, default_capacity_blocks: int = DEFAULT_CAPACITY_BLOCKS) -> None:
        if default_capacity_blocks < 1:
            raise ValueError("default_capacity_blocks must be >= 1")
        self._default_capacity = default_capacity_blocks
        self._lru: dict[str, OrderedDict[int, int]] = {}  # replica → hash → weight
        self._weight: dict[str, int] = {}
        self._capacity: dict[str, int] = {}
        self._holders: dict[int, set[str]] = {}

    def capacity(self, replica: str) -> int:
        return self._capacity.get(replica, self._default_capacity)

    def set_capacity(self, replica: str, blocks: int) -> None:
        """Bound a replica's entries (in base blocks), e.g. from its reported KV size."""
        self._capacity[replica] = max(1, blocks)
        self._evict(replica)

    def fill(self, replica: str) -> float:
        """How full the replica's tracked cache is, 0..1 (in base blocks of its capacity)."""
        return min(1.0, self._weight.get(replica, 0) / self.capacity(replica))

    def blocks(self, replica: str) -> int:
        """Entries tracked for a replica."""
        return len(self._lru.get(replica, ()))

    def record(self, replica: str, hashes: Sequence[int]) -> None:
        """The replica was sent a request with these block hashes: it will hold them."""
        lru = self._lru.get(replica)
        if lru is None:
            lru = self._lru[replica] = OrderedDict()
            self._weight[replica] = 0
        added = 0
        for i in range(len(hashes) - 1, -1, -1):
            h = hashes[i]
            if h in lru:
                lru.move_to_end(h)
                continue
            w = block_weight(i)
            lru[h] = w
            added += w
            holders = self._holders.get(h)
            if holders is None:
                self._holders[h] = {replica}
            else:
                holders.add(replica)
        if added:
            self._weight[replica] += added
            self._evict(replica)

    def match(self, hashes: Sequence[int], replicas: Iterable[str]) -> dict[str, int]:
        """For each replica, how many leading blocks of `hashes` it holds."""
        alive = set(replicas)
        matched = dict.fromkeys(alive, 0)
        depth = 0
        for h in hashes:
            holders = self._holders.get(h)
            if not holders:
                break
            still = alive & holders  # set work in C: O(replicas) per block, no Python loop
            if len(still) != len(alive):
                for r in alive - still:
                    matched[r] = depth
                alive = still
                if not alive:
                    break
            depth += 1
        for r in alive:
            matched[r] = depth
        return matched

    def clear(self) -> None:
        """Forget everything (the block size changed, so every hash did)."""
        self._lru.clear()
        self._weight.clear()
        self._holders.clear()

    def remove_replica(self, replica: str) -> None:
        """Forget a replica (it left the pool, or restarted with an empty cache)."""
        for h in self._lru.pop(replica, ()):
            self._drop_holder(h, replica)
        self._weight.pop(replica, None)
        self._capacity.pop(replica, None)

    def _evict(self, replica: str) -> None:
        lru = self._lru.get(replica)
        if lru is None:
            return
        limit = self.capacity(replica)
        weight = self._weight[replica]
        while weight > limit and lru:
            h, w = lru.popitem(last=False)
            weight -= w
            self._drop_holder(h, replica)
        self._weight[replica] = weight

    def _drop_holder(self, h: int, replica: str) -> None:
        holders = self._holders.get(h)
        if holders is not None:
            holders.discard(replica)
            if not holders:
                del self._holders[h]
