"""Running totals over each replica's least recently used prefix-index entries.

`PrefixIndex.displaced` walks a replica's oldest entries until their weight covers the excess
a request would add, valuing each w × r ÷ (r + 1) for r reuses. Asked for every full
candidate of every request, the walks were most of a decision (decision 0033). A `LruTails`
keeps each replica's walk: its oldest entries in order with the running weight and value
after each, so an answer is a bisection. Entries leave a tail as they leave the LRU's old end
(evicted, dropped, or used and so moved to the new end); what stays keeps its order, weight
and reuse count, so the tail stays the LRU's first entries, and its totals are summed again
in C. The totals add the same terms in the same order as the walk: answers are the walk's to
the last bit. Each kept hash lists the tails holding it, so the candidates whose walked part
holds an entry the request spares (its matched head) are found in one pass over the request;
those are walked in full.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import OrderedDict
from collections.abc import Collection, Iterable, Mapping, Sequence
from itertools import accumulate, compress, islice, repeat
from operator import add, mul, not_, truediv

SLACK = 2  # a tail is built to cover this many times the excess asked


class Tail:
    """A replica's oldest entries: `hashes` in LRU order with their weights `ws`, reuse values
    `terms` and increasing sequence numbers `seqs`; `weights[k]` and `values[k]` the running
    sums over the first k + 1 (summed again on first use after a change), `total` the last;
    `complete` when these are all the replica's entries."""

    __slots__ = (
        "complete",
        "hashes",
        "members",
        "seqs",
        "terms",
        "total",
        "values",
        "weights",
        "ws",
    )

    def __init__(
        self, lru: OrderedDict[int, int], counts: Mapping[int, int], need: int, seq: int
    ) -> None:
        # `PrefixIndex.displaced`'s walk, spares aside, in C. The LRU is cold in the CPU
        # cache: read it a slice at a time, no further than `need` asks.
        values = iter(lru.values())
        ws: list[int] = []
        total = 0
        while total < need:
            chunk = list(islice(values, max(16, (need - total) // 2)))
            if not chunk:
                break
            ws += chunk
            total += sum(chunk)
        weights = list(accumulate(ws))
        m = min(bisect_left(weights, need) + 1, len(weights))
        del ws[m:], weights[m:]
        self.hashes = list(islice(lru, m))
        self.members = set(self.hashes)
        self.seqs = list(range(seq, seq + m))
        self.ws = ws
        reuses = list(map(counts.get, self.hashes, repeat(0)))
        # w × r / (r + 1) as the walk computes it; an entry never reused adds 0.0, which
        # leaves a running sum unchanged, as the walk's skip does.
        self.terms = list(map(truediv, map(mul, ws, reuses), map(add, reuses, repeat(1))))
        self.complete = m == len(lru)
        self.weights: list[int] | None = weights
        self.values: list[float] | None = list(accumulate(self.terms, initial=0.0))[1:]
        self.total = weights[-1] if weights else 0

    def drop(self, gone: Collection[int]) -> list[int]:
        """`gone` are no longer among the replica's oldest entries; returns those it held."""
        k = len(gone)
        if type(gone) is list and self.hashes[:k] == gone:  # an eviction: the front
            removed = self.hashes[:k]
            del self.hashes[:k], self.ws[:k], self.terms[:k], self.seqs[:k]
        else:
            if not isinstance(gone, set | frozenset):
                gone = set(gone)
            selectors = list(map(not_, map(gone.__contains__, self.hashes)))
            removed = list(compress(self.hashes, map(not_, selectors)))
            self.hashes = list(compress(self.hashes, selectors))
            self.ws = list(compress(self.ws, selectors))
            self.terms = list(compress(self.terms, selectors))
            self.seqs = list(compress(self.seqs, selectors))
        self.members.difference_update(removed)
        self.weights = self.values = None
        self.total = sum(self.ws)
        return removed

    def covers(self, excess: int) -> bool:
        return self.complete or self.total >= excess

    def walked(self, excess: int) -> tuple[int, float]:
        """Position of the last entry the walk for `excess` (> 0) takes, and its total."""
        weights, values = self.weights, self.values
        if weights is None or values is None:
            weights = self.weights = list(accumulate(self.ws))
            values = self.values = list(accumulate(self.terms, initial=0.0))[1:]
        last = min(bisect_left(weights, excess), len(weights) - 1)
        return last, values[last]


Walked = tuple[str, Tail, int]  # a candidate's replica, its tail and the last entry walked


class LruTails:
    """Each replica's `Tail`, kept in step with its LRU (see the module docstring)."""

    def __init__(self) -> None:
        self.kept: dict[str, Tail] = {}  # read directly by `PrefixIndex.displaced_list`
        # hash → replica → the entry's sequence number in that replica's tail
        self._where: dict[int, dict[str, int]] = {}
        self._seq = 0

    def tail(
        self,
        replica: str,
        lru: OrderedDict[int, int],
        counts: Mapping[int, int],
        excess: int,
        widest: int,
    ) -> Tail:
        """The replica's tail, long enough for `excess`; built or lengthened for `widest`, the
        largest excess the same request may ask of it."""
        old = self.kept.get(replica)
        if old is not None:
            if old.covers(excess):
                return old
            self._unlist(replica, old.hashes)
        # With room to spare: each dispatch to the replica evicts about one prompt from the
        # tail's front, and the next request's excess is about the same again, or up to the
        # widest (the whole prompt where nothing matches).
        tail = self.kept[replica] = Tail(lru, counts, SLACK * max(excess, widest), self._seq)
        self._seq += len(tail.hashes)
        where = self._where
        for h, q in zip(tail.hashes, tail.seqs, strict=True):
            holders = where.get(h)
            if holders is None:
                where[h] = {replica: q}
            else:
                holders[replica] = q
        return tail

    def leave(self, replica: str, hashes: Collection[int], grown: bool) -> None:
        """`hashes` left the replica's LRU or moved to its new end; `grown` if entries were
        added or moved after the tail (then it is no longer all of them)."""
        tail = self.kept.get(replica)
        if tail is None:
            return
        if grown:
            tail.complete = False
        if tail.members.isdisjoint(hashes):  # the usual case for a request's blocks
            return
        self._unlist(replica, tail.drop(hashes if type(hashes) is list else set(hashes)))
        if not tail.hashes:
            del self.kept[replica]

    def spared(
        self, walked: Mapping[int, Walked], hashes: Sequence[int], depths: Sequence[int]
    ) -> set[int]:
        """The candidates (positions, keys of `walked`) whose walks take an entry of their
        matched head `hashes[:depths[k]]`, which `PrefixIndex.displaced` passes over."""
        where = self._where
        hits = where.keys() & hashes[: max(map(depths.__getitem__, walked))]
        if not hits:  # the usual case: a matched head was used recently, far from the tails
            return set()
        n = len(hashes)
        first = dict(zip(reversed(hashes), range(n - 1, -1, -1), strict=True))
        # replica → (candidate, its depth, the sequence number of the last entry it walks)
        open_ = {r: (k, depths[k], tail.seqs[last]) for k, (r, tail, last) in walked.items()}
        out = set()
        for h in sorted(hits, key=first.__getitem__):  # the head's first blocks first
            holders = where[h]
            i = first[h]
            for r in holders.keys() & open_.keys():  # C: the candidates still in question
                k, depth, limit = open_[r]
                if i < depth and holders[r] <= limit:
                    out.add(k)
                    del open_[r]
            if not open_:
                break
        return out

    def _unlist(self, replica: str, hashes: Iterable[int]) -> None:
        where = self._where
        for h in hashes:
            holders = where[h]
            if len(holders) == 1:
                del where[h]
            else:
                del holders[replica]

    def clear(self) -> None:
        self.kept.clear()
        self._where.clear()
