"""Running totals over each replica's least recently used prefix-index entries.

`PrefixIndex.displaced` walks a replica's oldest entries until their weight covers the excess
a request would add, valuing each w × r ÷ (r + 1) for r reuses. Asked for every full
candidate of every request, the walks were most of a decision (decision 0033). A `LruTails`
keeps each replica's walk: its oldest entries in order with the running weight and value
after each, so an answer is a bisection. Entries leave a tail as they leave the LRU's old end
(evicted, dropped, or used and so moved to the new end); what stays keeps its order, weight
and reuse count, so the tail stays the LRU's first entries, and its totals are summed again
in C. The totals add the same terms in the same order as the walk: answers are the walk's to
the last bit. Where the walked part holds an entry the request spares (its matched head),
the walk goes on from the first such entry (`Tail.sparing`), found by the chain order of an
LRU's entries. `walks` answers a decision's candidates (compiled: `displaced_native`).
"""

from __future__ import annotations

from bisect import bisect_left
from collections import OrderedDict
from collections.abc import Collection, Mapping, Sequence
from contextlib import suppress
from itertools import accumulate, compress, islice, repeat
from operator import add, gt, mul, not_, truediv

from scoring.state.prefix_hash import untracked

SLACK = 2  # a tail is built to cover this many times the excess asked


class Tail:
    """A replica's oldest entries: `hashes` in LRU order (and as a set, `members`) with their
    weights `ws` and reuse values `terms`; `weights[k]` and `values[k]` the running sums over
    the first k + 1 (summed again on first use after a change), `total` the last; `complete`
    when these are all the replica's entries."""

    __slots__ = (
        "complete",
        "hashes",
        "members",
        "terms",
        "total",
        "values",
        "weights",
        "ws",
    )

    def __init__(self, lru: OrderedDict[int, int], counts: Mapping[int, int], need: int) -> None:
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
        # Lists of numbers only, kept a while: out of the cyclic collector (`untracked`).
        self.hashes = untracked(list(islice(lru, m)))
        self.members = untracked(set(self.hashes))
        self.ws = untracked(ws)
        reuses = list(map(counts.get, self.hashes, repeat(0)))
        # w × r / (r + 1) as the walk computes it; an entry never reused adds 0.0, which
        # leaves a running sum unchanged, as the walk's skip does.
        terms = map(truediv, map(mul, ws, reuses), map(add, reuses, repeat(1)))
        self.terms = untracked(list(terms))
        self.complete = m == len(lru)
        self.weights: list[int] | None = untracked(weights)
        self.values: list[float] | None = untracked(list(accumulate(self.terms, initial=0.0))[1:])
        self.total = weights[-1] if weights else 0

    def drop(self, gone: Collection[int]) -> None:
        """`gone` are no longer among the replica's oldest entries."""
        k = len(gone)
        if type(gone) is list and self.hashes[:k] == gone:  # an eviction: the front
            removed = gone
            del self.hashes[:k], self.ws[:k], self.terms[:k]
        else:
            if not isinstance(gone, set | frozenset):
                gone = set(gone)
            selectors = list(map(not_, map(gone.__contains__, self.hashes)))
            removed = list(compress(self.hashes, map(not_, selectors)))
            self.hashes = untracked(list(compress(self.hashes, selectors)))
            self.ws = untracked(list(compress(self.ws, selectors)))
            self.terms = untracked(list(compress(self.terms, selectors)))
        self.members.difference_update(removed)
        self.weights = self.values = None
        self.total = sum(self.ws)

    def covers(self, excess: int) -> bool:
        return self.complete or self.total >= excess

    def summed(self) -> tuple[list[int], list[float]]:
        """`weights` and `values`, summed again first if a change cleared them."""
        weights, values = self.weights, self.values
        if weights is None or values is None:
            weights = self.weights = untracked(list(accumulate(self.ws)))
            values = self.values = untracked(list(accumulate(self.terms, initial=0.0))[1:])
        return weights, values

    def sparing(self, excess: int, spare: Collection[int], start: int = 0) -> float | None:
        """`PrefixIndex.displaced`'s walk for `excess` passing over the hashes in `spare`, on
        the tail's lists (the same sums in the same order: an entry never reused adds 0.0);
        None if the walk would go past the tail's end. `start`: no entry before it is spared,
        so the walk's sums there are the running sums (the same additions in the same order),
        and it goes on from there."""
        total = 0
        value = 0.0
        if start:
            weights, values = self.summed()
            if weights[start - 1] >= excess:  # the walk ends before it: nothing is spared
                last = bisect_left(weights, excess)
                return values[last]
            total, value = weights[start - 1], values[start - 1]
        rest = zip(self.hashes, self.ws, self.terms, strict=True)
        for h, w, term in islice(rest, start, None):
            if total >= excess:
                return value
            if h in spare:
                continue
            total += w
            value += term
        return value if total >= excess or self.complete else None

    def walked(self, excess: int) -> tuple[int, float]:
        """Position of the last entry the walk for `excess` (> 0) takes, and its total."""
        weights, values = self.summed()
        last = min(bisect_left(weights, excess), len(weights) - 1)
        return last, values[last]


Missed = list[tuple[int, int]]  # (candidate, excess): no summed tail covering the excess
Spared = list[tuple[int, Tail, int]]  # (candidate, its tail, the first entry its walk spares)


def walks(  # noqa: PLR0917 (the compiled one's signature)
    replicas: list[str],
    new_weights: list[int],
    rooms: Mapping[str, int],
    kept: Mapping[str, Tail],
    hashes: Sequence[int],
    depths: Sequence[int],
    out: list[float],
    never_full: int,
) -> tuple[Missed, Spared]:
    """The walks of `PrefixIndex.displaced_list` that a kept tail answers by bisection: for
    each candidate k whose new weight exceeds its room (`rooms`, `never_full` for a replica
    without entries) and whose tail is summed and covers the excess, `out[k]` = the walk's
    value. The others over their room come back as missed, with their excess; those whose walk
    takes the last block of their matched head `hashes[:depths[k]]` as spared, with where
    (the walk then has to pass over the head). Compiled: `scoring.state.displaced_native`."""
    missed: Missed = []
    spared: Spared = []
    if len(new_weights) != len(replicas) or len(out) != len(replicas):
        raise ValueError("replicas, new_weights and out differ in length")
    room_of = list(map(rooms.get, replicas, repeat(never_full)))
    for k in compress(range(len(replicas)), map(gt, new_weights, room_of)):  # over their room
        excess = new_weights[k] - room_of[k]  # weight + new weight − capacity
        tail = kept.get(replicas[k])
        if (
            tail is None
            or tail.weights is None
            or tail.values is None
            or not (tail.complete or tail.total >= excess)
        ):
            missed.append((k, excess))
            continue
        weights = tail.weights
        if not weights:  # a complete tail with no entry: the replica holds none
            continue
        last = bisect_left(weights, excess)
        if last == len(weights):
            last -= 1
        out[k] = tail.values[last]
        if (start := spared_from(tail, hashes, depths[k], last)) is not None:
            spared.append((k, tail, start))
    return missed, spared


def spared_from(tail: Tail, hashes: Sequence[int], depth: int, last: int) -> int | None:
    """Where a walk taking the tail's entries up to `last` first meets the matched head
    `hashes[:depth]`, or None if it takes none of it. A head's oldest entry is its last block
    (`scoring.state.prefix_index`): the walk takes an entry of it iff it takes that one, and
    none before it."""
    if depth and hashes[depth - 1] in tail.members:
        with suppress(ValueError):
            return tail.hashes.index(hashes[depth - 1], 0, last + 1)
    return None


class LruTails:
    """Each replica's `Tail`, kept in step with its LRU (see the module docstring)."""

    def __init__(self) -> None:
        self.kept: dict[str, Tail] = {}  # read directly by `PrefixIndex.displaced_list`
        # The longest tail each replica was asked for (entries' weight), and over all: what
        # `refresh` builds, so that later requests, whose excess varies, find it long enough.
        self._want: dict[str, int] = {}
        self.want = 0

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
        if old is not None and old.covers(excess):
            return old
        # With room to spare: each dispatch to the replica evicts about one prompt from the
        # tail's front, and the next request's excess is about the same again, or up to the
        # widest (the whole prompt where nothing matches).
        need = SLACK * max(excess, widest)
        if need > self._want.get(replica, 0):
            self._want[replica] = need
            self.want = max(self.want, need)
        return self._build(replica, lru, counts, max(need, self._want[replica]))

    def refresh(self, replica: str, lru: OrderedDict[int, int], counts: Mapping[int, int]) -> None:
        """After the replica's LRU changed (a request recorded there and it is full, or nearly):
        its tail built (again) now, rather than by one of the next decisions, at the longest
        size asked of it (of any replica, for a first one) when it has none or it no longer
        covers half of that. Its sums are left to the first decision that reads them."""
        tail = self.kept.get(replica)
        want = self._want.get(replica, self.want)
        if (tail is None or (not tail.complete and tail.total * SLACK < want)) and want:
            self._build(replica, lru, counts, want)

    def _build(
        self, replica: str, lru: OrderedDict[int, int], counts: Mapping[int, int], need: int
    ) -> Tail:
        tail = self.kept[replica] = Tail(lru, counts, need)
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
        tail.drop(hashes if type(hashes) is list else set(hashes))
        if not tail.hashes:
            del self.kept[replica]

    def clear(self) -> None:
        self.kept.clear()
        self._want.clear()
        self.want = 0
