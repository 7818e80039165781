"""Which prompt-prefix blocks each replica probably holds in its KV cache.

A data structure, not a plugin: the gateway and the simulator record every block of a request
for the replica it was sent to, and the prefix scorers read it. Per replica the blocks live in
an LRU bounded by its KV capacity (in base blocks, `scoring.state.prefix_hash.block_weight`),
so the index forgets roughly when the engine does. A request's hashes are chained from its
first block and touched tail first, so what remains of a prefix is its beginning (as in
vLLM's free queue), and in each LRU a prompt's blocks are older the later they come in it
(`displaced_list` relies on it). A map from block hash to its holders makes a match cost
O(matched blocks), whatever the number of replicas. Holder sets are immutable and shared:
blocks updated together share one `_Run` (their holders and hashes in order), so a match
jumps over a run with one lookup and one comparison, and steps block by block only through
stale runs (decision 0005). `memory_bytes` is entries × `ENTRY_BYTES` (~150 bytes a block on
CPython 3.11, which the tests measure), for the metrics.
"""

from __future__ import annotations

import math
from collections import Counter, OrderedDict, deque
from collections.abc import Iterable, Mapping, Sequence
from itertools import accumulate, groupby, islice, repeat

from scoring.state.lru_tails import LruTails, spared_from, walks
from scoring.state.prefix_hash import GROUP, common_prefix, untracked

try:
    from scoring.state.displaced_native import walks as _walks
except ImportError:  # not built (no C compiler): the reference walks
    _walks = None  # type: ignore[assignment]

DEFAULT_CAPACITY_BLOCKS = 31_250  # GIE's per-pod default LRU size
ENTRY_BYTES = 150  # per block held by one replica, as measured (module docstring)
_NEVER_FULL = 1 << 62  # the room of a replica without entries: no request fills it


class _Run:
    """Blocks that took the same holders in one update: their hashes in prompt order. While
    `intact`, every one of those hashes maps to this run."""

    __slots__ = ("hashes", "holders", "intact")

    def __init__(self, hashes: tuple[int, ...], holders: frozenset[str]) -> None:
        self.hashes = untracked(hashes)
        self.holders = holders
        self.intact = True

    def detach(self, blocks: tuple[int, ...]) -> None:
        """`blocks` (in prompt order) now map elsewhere. A head or a tail leaves the rest of
        the run intact (the usual case: a replica gains a prompt's head, or evicts its tail);
        anything else makes it stale."""
        if not self.intact:
            return
        k, hashes = len(blocks), self.hashes
        if hashes[len(hashes) - k :] == blocks:
            self.hashes = untracked(hashes[: len(hashes) - k])
        elif hashes[:k] == blocks:
            self.hashes = untracked(hashes[k:])
        else:
            self.intact = False


def _same_run(hashes: tuple[int, ...], i: int, run: _Run) -> int:
    """How many blocks from `hashes[i]` on (at least 1) map to `run`, as far as the prompt
    and the run agree block for block; 1 for a stale run (the next block is looked up)."""
    ordered = run.hashes
    if not run.intact or len(ordered) < 2:
        return 1
    try:
        j = 0 if ordered[0] == hashes[i] else ordered.index(hashes[i])  # intact: it is there
    except ValueError:  # never, while runs stay consistent; then a plain step is still right
        return 1
    # As far as the prompt and the run agree, to the end of either (at least this block).
    return common_prefix(hashes, i, ordered, j, min(len(hashes) - i, len(ordered) - j)) or 1


_Last = tuple[tuple[int, ...], int, tuple[str, ...], dict[str, int], list[int]]


class PrefixIndex:
    """Per-replica LRU of block hashes, plus hash → replicas for matching."""

    def __init__(self, default_capacity_blocks: int = DEFAULT_CAPACITY_BLOCKS) -> None:
        if default_capacity_blocks < 1:
            raise ValueError("default_capacity_blocks must be >= 1")
        self._default_capacity = default_capacity_blocks
        self._lru: dict[str, OrderedDict[int, int]] = {}  # replica → hash → weight
        self._weight: dict[str, int] = {}
        self._capacity: dict[str, int] = {}
        self._fill: dict[str, float] = {}  # replica → fill(replica), for the replicas with weight
        self._room: dict[str, int] = {}  # replica → capacity − weight, for the same replicas
        self._least: float | None = None  # min(self._room.values()), None: to be worked out
        self._tails = LruTails()  # for `displaced_list`
        # replica → hash → times a request found that entry held (entries never reused: absent)
        self._reuses: dict[str, Counter[int]] = {}
        self._holders: dict[int, _Run] = {}
        self._solo: dict[str, frozenset[str]] = {}  # replica → {replica}, the one instance
        self._version = 0  # bumped whenever a block gains or loses a holder
        # The last match over many replicas, for the other scorers of the same cycle and the
        # one-replica match at dispatch: (hashes, version, replicas asked, those of them
        # holding a head → its length in blocks, depths in the order asked, filled on first
        # use).
        self._last: _Last | None = None
        self._asked: tuple[tuple[str, ...], frozenset[str]] | None = None  # `_set_of`'s

    def capacity(self, replica: str) -> int:
        return self._capacity.get(replica, self._default_capacity)

    def set_capacity(self, replica: str, blocks: int) -> None:
        """Bound a replica's entries (in base blocks), e.g. from its reported KV size."""
        self._capacity[replica] = max(1, blocks)
        self._evict(replica)
        self._refill(replica)

    def _refill(self, replica: str) -> None:
        # `fill`, kept up to date for `fill_list` (read per candidate of every request).
        weight, capacity = self._weight.get(replica, 0), self.capacity(replica)
        x = weight / capacity
        self._fill[replica] = x if x < 1.0 else 1.0
        room, old = capacity - weight, self._room.get(replica)
        self._room[replica] = room
        least = self._least  # min(self._room.values()), kept as rooms change one at a time
        if least is not None:
            if room <= least:
                self._least = room
            elif old is not None and old <= least:  # the least room may have grown
                self._least = None

    def fill(self, replica: str) -> float:
        """How full the replica's tracked cache is, 0..1 (in base blocks of its capacity)."""
        capacity = self._capacity.get(replica, self._default_capacity)
        return min(1.0, self._weight.get(replica, 0) / capacity)

    def blocks(self, replica: str) -> int:
        """Entries tracked for a replica."""
        return len(self._lru.get(replica, ()))

    def memory_bytes(self, replica: str) -> int:
        """Estimated bytes of the replica's entries (`ENTRY_BYTES` each; blocks two replicas
        share cost each of them somewhat less, so this errs high)."""
        return self.blocks(replica) * ENTRY_BYTES

    def fills(self, replicas: Iterable[str]) -> dict[str, float]:
        """`fill` of each replica."""
        replicas = list(replicas)
        return dict(zip(replicas, self.fill_list(replicas), strict=True))

    def fill_list(self, replicas: Sequence[str]) -> list[float]:
        """`fill` of each replica, in order."""
        if type(self).fill is not PrefixIndex.fill:  # a subclass answers differently
            return [self.fill(r) for r in replicas]
        return list(map(self._fill.get, replicas, repeat(0.0)))  # no weight: 0 / capacity

    def record(self, replica: str, hashes: Sequence[int]) -> None:
        """The replica was sent a request with these block hashes (a prompt's chained hashes,
        from its first block): it will hold them."""
        lru = self._lru.get(replica)
        if lru is None:
            lru = self._lru[replica] = OrderedDict()
            self._weight[replica] = 0
        if hashes:  # each leaves the old end: moved to the new one, or new there
            self._tails.leave(replica, hashes, grown=True)
        # One pass touching each entry once: the LRU is large and cold in the CPU cache, so
        # memory accesses, not Python steps, set the cost (bulk passes in C measured slower).
        # The head the last match found on this replica is held: it is only moved, in C.
        move_to_end = lru.move_to_end
        held = self._held_head(replica, hashes)
        fresh = []
        reused = []
        added = 0
        for i in range(len(hashes) - 1, held - 1, -1):  # tail first: the head ends most recent
            h = hashes[i]
            if h in lru:
                move_to_end(h)
                reused.append(h)
            else:
                lru[h] = w = 1 << (i // GROUP)  # block_weight(i), inlined: a hot loop
                added += w
                fresh.append(h)
        if held or reused:
            reuses = self._reuses.get(replica)
            if reuses is None:
                reuses = self._reuses[replica] = Counter()
            if held:
                deque(map(move_to_end, hashes[held - 1 :: -1]), maxlen=0)
                reuses.update(hashes[:held])  # counted in C
            reuses.update(reused)
        if added:
            self._weight[replica] += added
            self._add_holder(replica, fresh)
            self._evict(replica)
            self._refill(replica)
        tails = self._tails  # ready for the next decisions, where they may be asked for
        if replica in tails.kept or self._room.get(replica, _NEVER_FULL) < tails.want:
            tails.refresh(replica, lru, self._reuses.get(replica) or {})

    def _held_head(self, replica: str, hashes: Sequence[int]) -> int:
        """Leading blocks of `hashes` the replica holds, as the last match (if still valid for
        these very hashes) found; 0 when unknown."""
        last = self._last
        if last is None or last[0] is not hashes or last[1] != self._version:
            return 0
        return last[3].get(replica, 0)

    def match(self, hashes: Sequence[int], replicas: Iterable[str]) -> dict[str, int]:
        """For each replica, how many leading blocks of `hashes` it holds."""
        asked = replicas if type(replicas) is tuple else tuple(replicas)
        last = self._last
        if last is not None and last[0] is hashes and last[1] == self._version:
            held = last[3]
            if asked is last[2] or asked == last[2] or self._among(asked, last[2]):
                # the next scorer of the same cycle, or e.g. the dispatch after the scoring
                return {r: held.get(r, 0) for r in asked}
        held = self._held(hashes, self._set_of(asked))
        if type(hashes) is tuple and len(asked) > 1:  # a tuple is immutable: identity will do
            self._last = (hashes, self._version, asked, held, [])
        return {r: held.get(r, 0) for r in asked}

    def match_list(self, hashes: Sequence[int], replicas: Sequence[str]) -> list[int]:
        """`match`, as a list in the order of `replicas`."""
        asked = replicas if type(replicas) is tuple else tuple(replicas)
        last = self._last
        if not (
            last is not None
            and last[0] is hashes
            and last[1] == self._version
            and (asked is last[2] or asked == last[2])
        ):
            if type(hashes) is not tuple or len(asked) < 2 or type(self).match is not _MATCH:
                return list(map(self.match(hashes, asked).__getitem__, asked))  # not kept
            # `match`, without the answer's dict
            held = self._held(hashes, self._set_of(asked))
            last = self._last = (hashes, self._version, asked, held, [])
        depths = last[4]  # filled once per cycle, copied out
        if not depths and asked:
            depths.extend(map(last[3].get, asked, repeat(0)))
        return list(depths)

    def _set_of(self, asked: tuple[str, ...]) -> frozenset[str]:
        """The replicas of `asked` as a set, kept while the same candidates are asked (a
        cycle's candidates are usually the last cycle's): so that a match costs O(holders),
        not O(candidates)."""
        kept = self._asked
        if kept is not None and asked is kept[0]:
            return kept[1]
        members = kept[1] if kept is not None and asked == kept[0] else frozenset(asked)
        self._asked = (asked, members)  # this very tuple, for `_among`
        return members

    def _among(self, asked: tuple[str, ...], known: tuple[str, ...]) -> bool:
        """Whether every replica of `asked` was among those of the last match (`known`)."""
        kept = self._asked
        members = kept[1] if kept is not None and kept[0] is known else frozenset(known)
        return members.issuperset(asked)

    def _held(self, hashes: Sequence[int], replicas: frozenset[str]) -> dict[str, int]:
        """The replicas among `replicas` that hold a head of `hashes`, and its length in
        blocks (the others hold none)."""
        if type(hashes) is not tuple:
            hashes = tuple(hashes)
        held: dict[str, int] = {}
        get = self._holders.get
        depth, n = 0, len(hashes)
        first = get(hashes[0]) if n else None
        if first is None:
            return held
        # Most candidates miss at once: start from the first block's holders among them (the
        # intersection walks the smaller of the two sets).
        alive = set(first.holders & replicas)
        # Run by run: the replicas that drop out do so at a run's first block.
        while depth < n and alive:
            run = get(hashes[depth])
            if run is None:
                break
            if not alive <= run.holders:
                held.update(dict.fromkeys(alive - run.holders, depth))
                alive &= run.holders
            depth += _same_run(hashes, depth, run)
        held.update(dict.fromkeys(alive, depth))
        return held

    def clear(self) -> None:
        """Forget everything (the block size changed, so every hash did)."""
        self._version += 1
        self._lru.clear()
        self._weight.clear()
        self._fill.clear()
        self._room.clear()
        self._least = None
        self._tails.clear()
        self._holders.clear()
        self._reuses.clear()

    def remove_replica(self, replica: str) -> None:
        """Forget a replica (it left the pool, or restarted with an empty cache)."""
        self._reuses.pop(replica, None)
        self._drop_holder(replica, list(self._lru.pop(replica, ())))
        self._weight.pop(replica, None)
        self._fill.pop(replica, None)
        self._room.pop(replica, None)
        self._least = None
        self._capacity.pop(replica, None)
        self._solo.pop(replica, None)

    def drop(self, replica: str, hashes: Sequence[int], start: int = 0) -> int:
        """The replica does not hold `hashes[start:]` after all (e.g. the request recorded for
        it failed there): it stops holding those it holds. Returns how many it dropped.
        Costs O(len(hashes) − start); the rest of the index is untouched."""
        lru = self._lru.get(replica)
        if not lru:
            return 0
        gone = [h for h in hashes[start:] if h in lru]
        if not gone:
            return 0
        self._weight[replica] -= sum(map(lru.pop, gone))
        gone.reverse()  # tails before heads, as evictions pass them
        self._drop_holder(replica, gone)
        self._refill(replica)
        return len(gone)

    def evict_oldest(self, replica: str, weight: int, spare: Iterable[int] = ()) -> int:
        """Evict the replica's least recently recorded entries, at least `weight` base blocks
        of them (or all), passing over the hashes in `spare`: what the engine evicted to make
        room for blocks the index had wrongly counted as held. Returns the entries evicted.
        Costs O(entries evicted + spared ones met)."""
        lru = self._lru.get(replica)
        if not lru or weight <= 0:
            return 0
        keep = set(spare)
        gone: list[int] = []
        total = 0
        for h, w in lru.items():
            if total >= weight:
                break
            if h not in keep:
                gone.append(h)
                total += w
        if not gone:
            return 0
        self._weight[replica] -= sum(map(lru.pop, gone))
        self._drop_holder(replica, gone)  # oldest first
        self._refill(replica)
        return len(gone)

    def reuses(self, replica: str, block: int) -> int:
        """How many requests found `block` held on the replica since it was stored there."""
        counts = self._reuses.get(replica)
        return counts.get(block, 0) if counts else 0

    def displaced(self, replica: str, new_weight: int, spare: Sequence[int] = ()) -> float:
        """What storing `new_weight` more base blocks on the replica would evict, valued:
        its least recently used entries, as many as exceed the capacity (passing over the
        hashes in `spare`, which the same request touches), each weighing its base blocks
        × r ÷ (r + 1) for an entry requests have found held r times (0 for an entry never
        reused, ½ for one reused once, → 1 for a popular prefix). Costs O(entries
        displaced); 0.0 at once when the replica has room."""
        lru = self._lru.get(replica)
        if not lru:
            return 0.0
        excess = self._weight[replica] + new_weight - self.capacity(replica)
        if excess <= 0:
            return 0.0
        counts: Mapping[int, int] = self._reuses.get(replica) or {}
        keep = set(spare) if spare else ()
        total = 0
        value = 0.0
        for h, w in lru.items():
            if total >= excess:
                break
            if h in keep:
                continue
            total += w
            r = counts.get(h)
            if r:
                value += w * r / (r + 1)
        return value

    def displaced_list(
        self,
        replicas: Sequence[str],
        new_weights: Sequence[int],
        hashes: Sequence[int],
        depths: Sequence[int],
    ) -> list[float]:
        """`displaced(r, w, hashes[:d])` for each replica r, new weight w and depth d, in order,
        the same floats: 0.0 at once where there is room, else from the kept tails
        (`scoring.state.lru_tails`), O(log entries) a replica unless the spares interfere."""
        n = len(replicas)
        if type(self).displaced is not PrefixIndex.displaced:  # a subclass answers itself
            triples = zip(replicas, new_weights, depths, strict=True)
            return [self.displaced(r, w, hashes[:d]) for r, w, d in triples]
        out = [0.0] * n
        widest = max(new_weights, default=0)
        if widest <= self._least_room():  # room everywhere
            return out
        names = replicas if isinstance(replicas, list) else list(replicas)
        weights = new_weights if isinstance(new_weights, list) else list(new_weights)
        given = (names, weights, self._room, self._tails.kept, hashes, depths, out, _NEVER_FULL)
        got = _walks(*given) if _walks is not None else None
        missed, spared = got if got is not None else walks(*given)
        for k, excess in missed:  # no tail summed or long enough yet: built, walked
            r = replicas[k]
            lru = self._lru.get(r)
            if not lru:
                continue
            counts: Mapping[int, int] = self._reuses.get(r) or {}
            room = new_weights[k] - excess
            tail = self._tails.tail(r, lru, counts, excess, widest - room)
            last, out[k] = tail.walked(excess)
            if (start := spared_from(tail, hashes, depths[k], last)) is not None:
                spared.append((k, tail, start))
        for k, tail, start in spared:
            # The walk passing over the matched head: on the tail where it is long enough,
            # from the first entry it spares.
            spare = set(hashes[: depths[k]])
            value = tail.sparing(new_weights[k] - self._room[replicas[k]], spare, start)
            if value is None:
                value = self.displaced(replicas[k], new_weights[k], hashes[: depths[k]])
            out[k] = value
        return out

    def fits_everywhere(self, weight: float) -> bool:
        """Whether `weight` new base blocks fit on every replica without an eviction, so that
        `displaced_list` answers 0.0 for every replica (False where a subclass answers
        `displaced` itself)."""
        return type(self).displaced is PrefixIndex.displaced and weight <= self._least_room()

    def _least_room(self) -> float:
        """min(capacity − weight) over the replicas with entries (inf for none), kept as rooms
        change (`_refill`) and worked out again only when the least one may have grown."""
        least = self._least
        if least is None:
            least = self._least = min(self._room.values(), default=math.inf)
        return least

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
        """`hashes` (a request's new blocks on `replica`, tail first) gain it as a holder."""
        solo = self._solo.get(replica)
        if solo is None:
            solo = self._solo[replica] = frozenset((replica,))
        self._version += 1
        holders_of = self._holders
        start = 0
        # One new run per run of blocks that shared their holders, assigned in bulk.
        for old, blocks in groupby(list(map(holders_of.get, hashes))):
            end = start + len(list(blocks))
            run = hashes[start:end]
            ordered = tuple(reversed(run))
            if old is None:
                grown = solo
            else:
                old.detach(ordered)
                grown = old.holders | solo
            holders_of.update(zip(run, repeat(_Run(ordered, grown))))
            start = end

    def _drop_holder(self, replica: str, hashes: list[int]) -> None:
        """`hashes` (oldest first: tails before heads) lose `replica` as a holder."""
        self._version += 1
        self._tails.leave(replica, hashes, grown=False)
        reuses = self._reuses.get(replica)
        if reuses:
            deque(map(reuses.pop, hashes, repeat(None)), maxlen=0)
        gone = frozenset((replica,))
        holders_of = self._holders
        start = 0
        for old, blocks in groupby(list(map(holders_of.get, hashes))):
            end = start + len(list(blocks))
            if old is not None:
                run = hashes[start:end]
                ordered = tuple(reversed(run))
                old.detach(ordered)
                rest = old.holders - gone
                if rest:
                    holders_of.update(zip(run, repeat(_Run(ordered, rest))))
                else:
                    deque(map(holders_of.__delitem__, run), maxlen=0)
            start = end


_MATCH = PrefixIndex.match  # a subclass answering its own `match` (the oracle) is asked it
