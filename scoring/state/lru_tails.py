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
those are walked from the first entry they spare.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import OrderedDict
from collections.abc import Collection, Iterable, Mapping, Sequence
from itertools import accumulate, compress, islice, repeat
from operator import add, is_, is_not, mul, not_, truediv
from typing import Literal

from scoring.state.prefix_hash import untracked

try:  # `spared_by_hits` compiled, with the lookups (the reference below where not built)
    from scoring.state import lru_tails_native
except ImportError:
    lru_tails_native = None  # type: ignore[assignment]

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
        # Lists of numbers only, kept a while: out of the cyclic collector (`untracked`).
        self.hashes = untracked(list(islice(lru, m)))
        self.members = set(self.hashes)
        self.seqs = untracked(list(range(seq, seq + m)))
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

    def drop(self, gone: Collection[int]) -> tuple[list[int], list[int]]:
        """`gone` are no longer among the replica's oldest entries; returns those it held and
        their sequence numbers."""
        k = len(gone)
        if type(gone) is list and self.hashes[:k] == gone:  # an eviction: the front
            removed, seqs = self.hashes[:k], self.seqs[:k]
            del self.hashes[:k], self.ws[:k], self.terms[:k], self.seqs[:k]
        else:
            if not isinstance(gone, set | frozenset):
                gone = set(gone)
            selectors = list(map(not_, map(gone.__contains__, self.hashes)))
            removed = list(compress(self.hashes, map(not_, selectors)))
            seqs = list(compress(self.seqs, map(not_, selectors)))
            self.hashes = untracked(list(compress(self.hashes, selectors)))
            self.ws = untracked(list(compress(self.ws, selectors)))
            self.terms = untracked(list(compress(self.terms, selectors)))
            self.seqs = untracked(list(compress(self.seqs, selectors)))
        self.members.difference_update(removed)
        self.weights = self.values = None
        self.total = sum(self.ws)
        return removed, seqs

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


Walked = tuple[str, Tail, int]  # a candidate's replica, its tail and the last entry walked


def _positions(hashes: Sequence[int], reach: int) -> dict[int, int]:
    """Each of the first `reach` hashes → its first position in the prompt."""
    head = hashes[:reach]
    return dict(zip(reversed(head), range(reach - 1, -1, -1), strict=True))


class LruTails:
    """Each replica's `Tail`, kept in step with its LRU (see the module docstring)."""

    def __init__(self) -> None:
        self.kept: dict[str, Tail] = {}  # read directly by `PrefixIndex.displaced_list`
        # hash → the sequence number of its entry in the one tail holding it, or the set of
        # those in the tails holding it. Numbers are handed out in order, tail by tail, and a
        # tail's are increasing: they say which tail and where, with no replica names to
        # look up (`spared_by_hits`).
        self._where: dict[int, int | set[int]] = {}
        self._seq = 0
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
        if old is not None:
            if old.covers(excess):
                return old
            self._unlist(old.hashes, old.seqs)
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
        if tail is None or (not tail.complete and tail.total * SLACK < want):
            if tail is not None:
                self._unlist(tail.hashes, tail.seqs)
            if want:
                self._build(replica, lru, counts, want)

    def _build(
        self, replica: str, lru: OrderedDict[int, int], counts: Mapping[int, int], need: int
    ) -> Tail:
        tail = self.kept[replica] = Tail(lru, counts, need, self._seq)
        self._seq += len(tail.hashes)
        where, hashes, seqs = self._where, tail.hashes, tail.seqs
        before = list(map(where.get, hashes))
        new = list(map(is_, before, repeat(None)))
        where.update(compress(zip(hashes, seqs, strict=True), new))  # held by no other tail
        for h, q, held in compress(zip(hashes, seqs, before, strict=True), map(not_, new)):
            if type(held) is set:
                held.add(q)
            else:  # a second tail
                pair: set[int] = {held, q}  # type: ignore[arg-type]  # an int here
                where[h] = untracked(pair)
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
        self._unlist(*tail.drop(hashes if type(hashes) is list else set(hashes)))
        if not tail.hashes:
            del self.kept[replica]

    def spared(
        self, walked: Mapping[int, Walked], hashes: Sequence[int], depths: Sequence[int]
    ) -> dict[int, int]:
        """The candidates (positions, keys of `walked`) whose walks take an entry of their
        matched head `hashes[:depths[k]]`, which `PrefixIndex.displaced` passes over, each
        with a position in its tail before which no entry is spared (for `Tail.sparing`)."""
        reach = max(map(depths.__getitem__, walked))
        least: dict[int, int] | Literal[False] | None = None
        if lru_tails_native is not None and type(walked) is dict:
            least = lru_tails_native.spared_hits(self._where, hashes, walked, depths)
        if least is None:  # not built, or a value it does not take: the reference
            # The tails holding each of the head's hashes, looked up once: the hits are few.
            holders = list(map(self._where.get, islice(hashes, reach)))
            hits = list(compress(range(reach), map(is_not, holders, repeat(None))))
            if not hits:  # the usual case: a matched head was used recently, far from tails
                return {}
            # Two ways to the same set: through each hit's tails, or along each candidate's
            # walked entries; the cheaper one (a long prompt whose head sits in many full
            # replicas' tails has tens of thousands of the former).
            walks = sum(last for _, _, last in walked.values()) + len(walked)
            met = len(hits) + sum([len(held) for held in holders if type(held) is set])
            least = False if walks < met else self.spared_by_hits(walked, depths, holders, hits)
        if least is False:  # more holders than walked entries: along the walks
            return dict.fromkeys(self.spared_by_walks(walked, hashes, depths, reach), 0)
        return {k: bisect_left(walked[k][1].seqs, q) for k, q in least.items()}

    @staticmethod
    def spared_by_hits(
        walked: Mapping[int, Walked],
        depths: Sequence[int],
        holders: Sequence[int | set[int] | None],
        hits: Iterable[int],
    ) -> dict[int, int]:
        """`spared`, one pass over the `hits` (positions in the prompt whose hash some tail
        holds; `holders[p]` its sequence number there, or the set of them): each spared
        candidate with the least sequence number of an entry it spares (what
        `lru_tails_native.spared_hits` answers)."""
        # Each candidate's walked entries hold the sequence numbers from its tail's first to
        # the last it walks, and no other tail's: found by bisection.
        spans = sorted(
            [(tail.seqs[0], tail.seqs[last], k) for k, (_, tail, last) in walked.items()]
        )
        firsts = [span[0] for span in spans]
        least: dict[int, int] = {}  # candidate → the least sequence number it spares
        for p in hits:
            held = holders[p]
            for q in (held,) if type(held) is int else held:  # type: ignore[union-attr]
                j = bisect_right(firsts, q) - 1
                if j < 0:
                    continue
                _, end, k = spans[j]
                # Past the candidate's walk, or beyond its matched head?
                if q > end or p >= depths[k]:
                    continue
                if q < least.get(k, end + 1):
                    least[k] = q
        return least

    @staticmethod
    def spared_by_walks(
        walked: Mapping[int, Walked], hashes: Sequence[int], depths: Sequence[int], reach: int
    ) -> set[int]:
        """`spared`, one pass over each candidate's walked entries (`reach`: the deepest
        head)."""
        first = _positions(hashes, reach)
        return {
            k
            for k, (_, tail, last) in walked.items()
            if min(map(first.get, islice(tail.hashes, last + 1), repeat(reach)), default=reach)
            < depths[k]
        }

    def _unlist(self, hashes: Sequence[int], seqs: Sequence[int]) -> None:
        """A tail's entries `hashes`, numbered `seqs`, leave it."""
        where = self._where
        for h, q in zip(hashes, seqs, strict=True):
            held = where[h]
            if type(held) is set:
                held.discard(q)
                if len(held) == 1:
                    where[h] = held.pop()
            else:
                del where[h]

    def clear(self) -> None:
        self.kept.clear()
        self._where.clear()
        self._want.clear()
        self.want = 0
