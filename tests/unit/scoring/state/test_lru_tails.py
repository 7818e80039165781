"""`PrefixIndex.displaced_list` (kept tails) against `PrefixIndex.displaced` (the walk)."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Mapping, Sequence
from unittest.mock import patch

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scoring.state import lru_tails
from scoring.state.lru_tails import LruTails, Walked

try:
    from scoring.state import lru_tails_native
except ImportError:  # not built: the reference alone
    lru_tails_native = None  # type: ignore[assignment]
from scoring.state.prefix_hash import covered_chars, hash_blocks, prefix_seed
from scoring.state.prefix_index import PrefixIndex

REPLICAS = ("r0", "r1", "r2", "r3")


def _chain(tag: str, n: int) -> tuple[int, ...]:
    return hash_blocks(bytes(covered_chars(n, 1)), prefix_seed(tag), 1)


STEMS = [_chain(f"stem{k}", 160) for k in range(4)]  # past 128 blocks: weights of 2

# One step: (operation, replica, stem, length, tail tag, amount)
steps = st.lists(
    st.tuples(
        st.sampled_from(["record", "record", "record", "drop", "evict", "capacity", "remove"]),
        st.sampled_from(REPLICAS),
        st.integers(0, len(STEMS) - 1),
        st.integers(0, 160),
        st.integers(0, 20),
        st.integers(1, 120),
    ),
    max_size=60,
)


def _prompt(stem: int, length: int, tag: int) -> tuple[int, ...]:
    return STEMS[stem][:length] + _chain(f"tail{tag}", 3)


def _reference(index: PrefixIndex, prompt: tuple[int, ...], weights: list[int]) -> list[float]:
    depths = index.match_list(prompt, REPLICAS)
    return [
        index.displaced(r, w, prompt[:d]) for r, w, d in zip(REPLICAS, weights, depths, strict=True)
    ]


def _apply(index: PrefixIndex, step: tuple[str, str, int, int, int, int]) -> None:
    op, replica, stem, length, tag, amount = step
    prompt = _prompt(stem, length, tag)
    if op == "record":
        index.record(replica, prompt)
    elif op == "drop":
        index.drop(replica, prompt, min(amount, len(prompt)))
    elif op == "evict":
        index.evict_oldest(replica, amount, prompt[: amount // 4])
    elif op == "capacity":
        index.set_capacity(replica, 40 + 4 * amount)
    else:
        index.remove_replica(replica)


def _replay(
    history: list[tuple[str, str, int, int, int, int]], weights: list[int], stem: int
) -> None:
    """Each step, then a decision's eviction term for a prompt: the kept tails' answers are
    the walk's, and the map of tails' entries is what the tails hold."""
    index = PrefixIndex(150)
    for k, step in enumerate(history):
        _apply(index, step)
        prompt = _prompt(stem, (37 * k) % 161, k % 5)
        depths = index.match_list(prompt, REPLICAS)
        got = index.displaced_list(REPLICAS, weights, prompt, depths)
        assert got == _reference(index, prompt, weights)  # bit for bit, not approximately
        assert _listed(index._tails) == _expected(index._tails)


@settings(max_examples=150, deadline=None)
@given(steps, st.lists(st.integers(0, 400), min_size=4, max_size=4), st.integers(0, 3))
def test_kept_tails_answer_as_the_walk_does(
    history: list[tuple[str, str, int, int, int, int]], weights: list[int], stem: int
) -> None:
    _replay(history, weights, stem)


@settings(max_examples=100, deadline=None)
@given(steps, st.lists(st.integers(0, 400), min_size=4, max_size=4), st.integers(0, 3))
def test_without_the_compiled_search_the_tails_answer_as_the_walk_does(
    history: list[tuple[str, str, int, int, int, int]], weights: list[int], stem: int
) -> None:
    with patch.object(lru_tails, "lru_tails_native", None):  # as where it is not built
        _replay(history, weights, stem)


def _listed(tails: LruTails) -> dict[int, list[int]]:
    """What the tails' map of hashes says: hash → the sequence numbers of its entries."""
    return {h: [q] if isinstance(q, int) else sorted(q) for h, q in tails._where.items()}


def _expected(tails: LruTails) -> dict[int, list[int]]:
    """The same, from the kept tails themselves."""
    out: dict[int, list[int]] = {}
    for tail in tails.kept.values():
        assert tail.seqs == sorted(tail.seqs)
        for h, q in zip(tail.hashes, tail.seqs, strict=True):
            out.setdefault(h, []).append(q)
    return {h: sorted(qs) for h, qs in out.items()}


def test_a_spared_head_among_the_oldest_entries_is_passed_over() -> None:
    index = PrefixIndex(20)
    old, new = _chain("old", 10), _chain("new", 10)
    index.record("r", old)
    index.record("r", old)  # every block of `old` reused once
    index.record("r", new)
    index.record("r", old[3:])  # `old`'s head stays the oldest three entries
    depths = index.match_list(old, ["r"])
    assert depths == [10]
    assert index.displaced("r", 8) == 1.5  # three entries reused once: 3 × ½
    assert index.displaced("r", 8, old) == 0.0  # the request's own blocks are passed over
    assert index.displaced_list(["r"], [8], old, depths) == [0.0]
    assert index.displaced_list(["r"], [8], old, [0]) == [1.5]


def test_a_record_on_a_full_replica_leaves_its_tail_ready_for_the_next_decision() -> None:
    index = PrefixIndex(60)
    for k in range(6):  # r full: each new prompt evicts the oldest one
        index.record("r", _chain(f"p{k}", 20))
    index.displaced_list(["r"], [20], _chain("q", 20), [0])  # a decision asks for a tail
    tails = index._tails
    for k in range(6, 30):
        index.record("r", _chain(f"p{k}", 20))
        tail = tails.kept["r"]  # rebuilt at the record when evictions shortened it
        assert tail.covers(20)
        prompt = _chain(f"q{k}", 20)
        got = index.displaced_list(["r"], [20], prompt, [0])
        assert tails.kept["r"] is tail  # the decision built nothing
        assert got == [index.displaced("r", 20)]


@settings(max_examples=150, deadline=None)
@given(steps, st.lists(st.integers(0, 400), min_size=4, max_size=4), st.integers(0, 3))
def test_both_ways_to_the_spared_candidates_agree(
    history: list[tuple[str, str, int, int, int, int]], weights: list[int], stem: int
) -> None:
    index = PrefixIndex(150)
    tails = index._tails
    asked: list[tuple[dict[int, Walked], Sequence[int], list[int]]] = []
    chosen = tails.spared

    def spared(
        walked: Mapping[int, Walked], hashes: Sequence[int], depths: Sequence[int]
    ) -> dict[int, int]:
        asked.append((dict(walked), hashes, list(depths)))
        return chosen(walked, hashes, depths)

    tails.spared = spared  # type: ignore[method-assign]
    for k, step in enumerate(history):
        _apply(index, step)
        prompt = _prompt(stem, (37 * k) % 161, k % 5)
        index.displaced_list(REPLICAS, weights, prompt, index.match_list(prompt, REPLICAS))
        for walked, hashes, depths in asked:
            reach = max(depths[j] for j in walked)
            holders = [tails._where.get(h) for h in hashes[:reach]]
            hits = [p for p, held in enumerate(holders) if held is not None]
            least = tails.spared_by_hits(walked, depths, holders, hits)
            assert set(least) == tails.spared_by_walks(walked, hashes, depths, reach)
            if lru_tails_native is not None:  # the compiled pass, where it answers, agrees
                native = lru_tails_native.spared_hits(tails._where, hashes, walked, depths)
                if isinstance(native, dict):
                    assert native == least
            by_hits = {j: bisect_left(walked[j][1].seqs, q) for j, q in least.items()}
            for j, start in by_hits.items():  # the first entry of the walk that is spared
                _, tail, last = walked[j]
                head = set(hashes[: depths[j]])
                assert start <= last
                assert tail.hashes[start] in head
                assert head.isdisjoint(tail.hashes[:start])
        asked.clear()


def _spared_setup() -> tuple[PrefixIndex, tuple[int, ...], list[int], dict[int, Walked]]:
    """A replica whose oldest entries are the head a prompt matches there, and the walk a
    decision asks of it."""
    index = PrefixIndex(20)
    old, new = _chain("old", 10), _chain("new", 10)
    for hashes in (old, old, new, old[3:]):
        index.record("r", hashes)
    depths = index.match_list(old, ["r"])
    asked: list[dict[int, Walked]] = []
    chosen = index._tails.spared

    def spared(
        walked: Mapping[int, Walked], hashes: Sequence[int], depths: Sequence[int]
    ) -> dict[int, int]:
        asked.append(dict(walked))
        return chosen(walked, hashes, depths)

    index._tails.spared = spared  # type: ignore[method-assign]
    assert index.displaced_list(["r"], [8], old, depths) == [0.0]
    return index, old, depths, asked[0]


def test_the_compiled_search_finds_the_first_spared_entry() -> None:
    native = pytest.importorskip("scoring.state.lru_tails_native")
    index, old, depths, walked = _spared_setup()
    where = index._tails._where
    least = native.spared_hits(where, old, walked, depths)
    assert least == {0: walked[0][1].seqs[0]}  # the head is the tail's first three entries
    assert native.spared_hits(where, old, walked, [0]) == {}  # no matched head: none spared
    assert native.spared_hits(where, old, {}, depths) == {}


def test_the_compiled_search_leaves_odd_values_to_the_reference() -> None:
    native = pytest.importorskip("scoring.state.lru_tails_native")
    index, old, depths, walked = _spared_setup()
    odd: dict[int, object] = dict(index._tails._where)
    odd[old[0]] = "seven"  # not a sequence number
    assert native.spared_hits(odd, old, walked, depths) is None
    odd[old[0]] = -1
    assert native.spared_hits(odd, old, walked, depths) is None
    odd[old[0]] = [walked[0][1].seqs[0]]  # a list
    assert native.spared_hits(odd, old, walked, depths) is None
    many = {h: set(range(10_000)) for h in old[:3]}  # more holders than walked entries
    assert native.spared_hits(many, old, walked, depths) is False
    assert index._tails.spared(walked, old, depths) == {0: 0}  # the module's answer
