"""Which prompt-prefix blocks each replica probably holds in its KV cache.

A data structure, not a plugin: the gateway (and the simulator) feed it from routing
decisions — every block of a request is recorded for the replica it was sent to — and the
prefix scorer reads it. Per replica the blocks live in an LRU bounded by that replica's KV
capacity (in base blocks, see `scoring.prefix_hash.block_weight`), so the index forgets
roughly when the engine does. A global map from block hash to the replicas holding it makes a
match cost O(matched blocks), whatever the number of replicas.

A request's blocks are touched tail first, so its head blocks are the most recently used and
evicted last: what remains of a prefix is always its beginning, as in vLLM's free queue.

Holder sets are immutable and shared: every block a replica alone holds points at that
replica's one-element set, and the blocks updated together by one record (or eviction) share
the one new set made for them. Consecutive blocks of a prompt therefore mostly point at the
same set object, so a match walks the prompt in runs of equal holders (in C) and does set
work once per run, not once per block.

Memory on CPython 3.11: about 140 bytes per block held by one replica (its 64-bit int, an
OrderedDict entry and a hash → holders entry; the holder sets are shared), about 110 bytes
per (block, replica) pair when two replicas share the blocks;
`tests/unit/scoring/test_prefix_index.py` measures it.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Iterable, Sequence
from itertools import accumulate, groupby, islice, repeat

from scoring.prefix_hash import GROUP

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
        self._holders: dict[int, frozenset[str]] = {}  # shared, never mutated
        self._solo: dict[str, frozenset[str]] = {}  # replica → {replica}, the one instance
        self._version = 0  # bumped whenever a block gains or loses a holder
        # The last match over many replicas, for the one-replica match of the same request
        # at dispatch: (hashes, version, answer).
        self._last: tuple[tuple[int, ...], int, dict[str, int]] | None = None

    def capacity(self, replica: str) -> int:
        return self._capacity.get(replica, self._default_capacity)

    def set_capacity(self, replica: str, blocks: int) -> None:
        """Bound a replica's entries (in base blocks), e.g. from its reported KV size."""
        self._capacity[replica] = max(1, blocks)
        self._evict(replica)

    def fill(self, replica: str) -> float:
        """How full the replica's tracked cache is, 0..1 (in base blocks of its capacity)."""
        capacity = self._capacity.get(replica, self._default_capacity)
        return min(1.0, self._weight.get(replica, 0) / capacity)

    def blocks(self, replica: str) -> int:
        """Entries tracked for a replica."""
        return len(self._lru.get(replica, ()))

    def fills(self, replicas: Iterable[str]) -> dict[str, float]:
        """`fill` of each replica."""
        if type(self).fill is not PrefixIndex.fill:  # a subclass answers differently
            return {r: self.fill(r) for r in replicas}
        weight, capacity, default = self._weight, self._capacity, self._default_capacity
        return {
            r: x if (x := weight.get(r, 0) / capacity.get(r, default)) < 1.0 else 1.0
            for r in replicas
        }

    def record(self, replica: str, hashes: Sequence[int]) -> None:
        """The replica was sent a request with these block hashes: it will hold them."""
        lru = self._lru.get(replica)
        if lru is None:
            lru = self._lru[replica] = OrderedDict()
            self._weight[replica] = 0
        move_to_end = lru.move_to_end
        fresh = []
        added = 0
        for i in range(len(hashes) - 1, -1, -1):  # tail first: the head ends most recent
            h = hashes[i]
            if h in lru:
                move_to_end(h)
            else:
                lru[h] = w = 1 << (i // GROUP)  # block_weight(i), inlined: a hot loop
                added += w
                fresh.append(h)
        if added:
            self._weight[replica] += added
            self._add_holder(replica, fresh)
            self._evict(replica)

    def match(self, hashes: Sequence[int], replicas: Iterable[str]) -> dict[str, int]:
        """For each replica, how many leading blocks of `hashes` it holds."""
        asked = list(replicas)
        last = self._last
        if last is not None and last[0] is hashes and last[1] == self._version:
            known = last[2]
            if all(map(known.__contains__, asked)):  # e.g. the dispatch after the scoring
                return {r: known[r] for r in asked}
        matched = self._match(hashes, asked)
        if type(hashes) is tuple and len(asked) > 1:  # a tuple is immutable: identity will do
            self._last = (hashes, self._version, dict(matched))
        return matched

    def _match(self, hashes: Sequence[int], replicas: list[str]) -> dict[str, int]:
        alive = set(replicas)
        matched = dict.fromkeys(alive, 0)
        if not alive:
            return matched
        depth = 0
        # Runs of blocks with equal holders (mostly the same shared set object, which groupby
        # compares by identity first): the replicas that drop out do so at a run's start.
        for holders, run in groupby(map(self._holders.get, hashes)):
            if holders is None:
                break
            if not alive <= holders:
                for r in alive - holders:
                    matched[r] = depth
                alive &= holders
                if not alive:
                    return matched
            depth += len(list(run))
        for r in alive:
            matched[r] = depth
        return matched

    def clear(self) -> None:
        """Forget everything (the block size changed, so every hash did)."""
        self._version += 1
        self._lru.clear()
        self._weight.clear()
        self._holders.clear()

    def remove_replica(self, replica: str) -> None:
        """Forget a replica (it left the pool, or restarted with an empty cache)."""
        self._drop_holder(replica, list(self._lru.pop(replica, ())))
        self._weight.pop(replica, None)
        self._capacity.pop(replica, None)
        self._solo.pop(replica, None)

    def _evict(self, replica: str) -> None:
        lru = self._lru.get(replica)
        if lru is None:
            return
        weight = self._weight[replica]
        excess = weight - self.capacity(replica)
        if excess <= 0:
            return
        count = 0  # the oldest entries whose weights first add up to the excess (or all)
        for count, total in enumerate(accumulate(lru.values()), 1):  # noqa: B007
            if total >= excess:
                break
        evicted = list(islice(lru, count))
        self._weight[replica] = weight - sum(map(lru.pop, evicted))
        self._drop_holder(replica, evicted)

    def _add_holder(self, replica: str, hashes: list[int]) -> None:
        solo = self._solo.get(replica)
        if solo is None:
            solo = self._solo[replica] = frozenset((replica,))
        self._version += 1
        holders_of = self._holders
        start = 0
        # One new set per run of blocks that shared their holders, assigned in bulk.
        for holders, run in groupby(list(map(holders_of.get, hashes))):
            end = start + len(list(run))
            grown = solo if holders is None else holders | solo
            holders_of.update(zip(hashes[start:end], repeat(grown)))
            start = end

    def _drop_holder(self, replica: str, hashes: list[int]) -> None:
        self._version += 1
        gone = frozenset((replica,))
        holders_of = self._holders
        start = 0
        for holders, run in groupby(list(map(holders_of.get, hashes))):
            end = start + len(list(run))
            rest = holders - gone if holders is not None else None
            if rest:
                holders_of.update(zip(hashes[start:end], repeat(rest)))
            elif rest is not None:
                deque(map(holders_of.__delitem__, hashes[start:end]), maxlen=0)
            start = end
