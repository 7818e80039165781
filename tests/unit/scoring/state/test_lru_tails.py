"""`PrefixIndex.displaced_list` (kept tails) against `PrefixIndex.displaced` (the walk), with
the compiled walks and with their Python reference, and the two against each other."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scoring.state import lru_tails, prefix_index
from scoring.state.prefix_hash import covered_chars, hash_blocks, prefix_seed
from scoring.state.prefix_index import _NEVER_FULL, PrefixIndex

try:
    from scoring.state import displaced_native
except ImportError:  # not built: the reference alone is tested
    displaced_native = None  # type: ignore[assignment]

PATHS = ["compiled", "reference"] if displaced_native is not None else ["reference"]

REPLICAS = ("r0", "r1", "r2", "r3")
STEM_BLOCKS = 160  # past 128 blocks: weights of 2


def _chain(tag: str, n: int) -> tuple[int, ...]:
    return hash_blocks(bytes(covered_chars(n, 1)), prefix_seed(tag), 1)


def _prompt(stem: int, length: int, tag: int) -> tuple[int, ...]:
    """A prompt's chained hashes, as the gateway records them: the first `length` blocks of
    stem `stem` (a tenant's system prompt, say), then 3 blocks of its own (`tag`)."""
    shared = covered_chars(length, 1)
    data = bytes(shared) + bytes([tag + 1]) * (covered_chars(length + 3, 1) - shared)
    hashes = hash_blocks(data, prefix_seed(f"stem{stem}"), 1)
    assert len(hashes) == length + 3
    return hashes


# One step: (operation, replica, stem, length, tail tag, amount)
steps = st.lists(
    st.tuples(
        st.sampled_from(["record", "record", "record", "drop", "evict", "capacity", "remove"]),
        st.sampled_from(REPLICAS),
        st.integers(0, 3),
        st.integers(0, STEM_BLOCKS),
        st.integers(0, 20),
        st.integers(1, 120),
    ),
    max_size=60,
)


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


def _in_chain_order(lru: OrderedDict[int, int], head: tuple[int, ...]) -> bool:
    """Whether the held blocks of a prompt's head are older the later they come in it."""
    position = {h: i for i, h in enumerate(lru)}
    held = [position[h] for h in head if h in position]
    return held == sorted(held, reverse=True)


@contextmanager
def _walks_by(path: str) -> Iterator[None]:
    """`displaced_list` on the compiled walks or on their Python reference."""
    saved = prefix_index._walks
    prefix_index._walks = displaced_native.walks if path == "compiled" else None
    try:
        yield
    finally:
        prefix_index._walks = saved


@pytest.mark.parametrize("path", PATHS)
@settings(max_examples=200, deadline=None)
@given(steps, st.lists(st.integers(0, 400), min_size=4, max_size=4), st.integers(0, 3))
def test_kept_tails_answer_as_the_walk_does(
    path: str, history: list[tuple[str, str, int, int, int, int]], weights: list[int], stem: int
) -> None:
    """Each step, then a decision's eviction term for a prompt: the kept tails' answers are
    the walk's, bit for bit; and the order they rely on holds in every replica's LRU."""
    index = PrefixIndex(150)
    with _walks_by(path):
        for k, step in enumerate(history):
            _apply(index, step)
            prompt = _prompt(stem, (37 * k) % (STEM_BLOCKS + 1), k % 5)
            depths = index.match_list(prompt, REPLICAS)
            got = index.displaced_list(REPLICAS, weights, prompt, depths)
            assert got == _reference(index, prompt, weights)  # bit for bit, not approximately
            for lru in index._lru.values():
                assert _in_chain_order(lru, prompt)


def _both_walks(
    index: PrefixIndex, prompt: tuple[int, ...], weights: list[int], depths: list[int]
) -> tuple[object, object, list[float], list[float]]:
    given = (list(REPLICAS), weights, index._room, index._tails.kept, prompt, depths)
    out_c, out_py = [0.0] * len(REPLICAS), [0.0] * len(REPLICAS)
    compiled = displaced_native.walks(*given, out_c, _NEVER_FULL)
    reference = lru_tails.walks(*given, out_py, _NEVER_FULL)
    return compiled, reference, out_c, out_py


@pytest.mark.skipif(displaced_native is None, reason="scoring.state.displaced_native not built")
@settings(max_examples=200, deadline=None)
@given(steps, st.lists(st.integers(0, 400), min_size=4, max_size=4), st.integers(0, 3))
def test_the_compiled_walks_answer_as_the_reference(
    history: list[tuple[str, str, int, int, int, int]], weights: list[int], stem: int
) -> None:
    """After each step and a decision (which builds and sums tails), the compiled walks and the
    reference on the same state: the same values written (the same float objects), the same
    candidates missed with the same excess, the same spared ones (the same tail, from the same
    entry)."""
    index = PrefixIndex(150)
    for k, step in enumerate(history):
        _apply(index, step)
        prompt = _prompt(stem, (37 * k) % (STEM_BLOCKS + 1), k % 5)
        depths = index.match_list(prompt, REPLICAS)
        compiled, reference, out_c, out_py = _both_walks(index, prompt, weights, depths)
        assert compiled is not None and reference is not None
        assert [v.hex() for v in out_c] == [v.hex() for v in out_py]
        assert compiled[0] == reference[0]  # missed
        assert [(k, id(t), j) for k, t, j in compiled[1]] == [
            (k, id(t), j) for k, t, j in reference[1]
        ]
        index.displaced_list(REPLICAS, weights, prompt, depths)  # tails built, summed


@pytest.mark.skipif(displaced_native is None, reason="scoring.state.displaced_native not built")
def test_the_compiled_walks_leave_what_they_cannot_read_to_the_reference() -> None:
    """A new weight that is not an int: no answer (the reference runs), and `displaced_list`
    still answers as the walk; a tail whose running weights are not ints: missed, walked by
    the caller to the same value."""
    index, old = _aged_head()
    given = (["r"], [8.0], index._room, index._tails.kept, old, [0])
    assert displaced_native.walks(*given, [0.0], _NEVER_FULL) is None
    assert index.displaced_list(["r"], [8.0], old, [0]) == [index.displaced("r", 8.0)]  # type: ignore[list-item]
    index.displaced_list(["r"], [8], old, [0])  # the tail built and summed
    tail = index._tails.kept["r"]
    assert tail.weights is not None
    tail.weights = [float(w) for w in tail.weights]  # type: ignore[misc]
    out = [0.0]
    missed, spared = displaced_native.walks(
        ["r"], [8], index._room, index._tails.kept, old, [0], out, _NEVER_FULL
    )
    assert (missed, spared, out) == ([(0, 8 - index._room["r"])], [], [0.0])
    assert index.displaced_list(["r"], [8], old, [0]) == [index.displaced("r", 8)] == [2.0]


def _aged_head() -> tuple[PrefixIndex, tuple[int, ...]]:
    """A full replica whose oldest entries are a few unused blocks, then the head a prompt
    matches there (`old`, each block reused once), then newer prompts."""
    index = PrefixIndex(24)
    old = _prompt(0, 10, 0)
    index.record("r", _prompt(1, 1, 1))  # 4 entries, never reused
    index.record("r", old)
    index.record("r", old)  # every block of `old` reused once
    index.record("r", _prompt(2, 4, 2))  # 7 more: 24 entries, full
    return index, old


def test_a_spared_head_among_the_oldest_entries_is_passed_over() -> None:
    index, old = _aged_head()
    depths = index.match_list(old, ["r"])
    assert depths == [13]
    assert index.displaced("r", 8) == 2.0  # 4 never reused, then 4 of `old`: 4 × ½
    assert index.displaced("r", 8, old) == 0.0  # the request's own blocks are passed over
    assert index.displaced_list(["r"], [8], old, depths) == [0.0]
    assert index.displaced_list(["r"], [8], old, [0]) == [2.0]
    # A shorter matched head is passed over too; the walk goes on past it.
    head = old[:5]
    assert index.displaced("r", 12, head) == index.displaced_list(["r"], [12], old, [5])[0]


def test_a_walk_that_stops_short_of_the_head_spares_nothing() -> None:
    index, old = _aged_head()
    depths = index.match_list(old, ["r"])
    assert index.displaced_list(["r"], [3], old, depths) == [0.0] == [index.displaced("r", 3)]
    assert index.displaced_list(["r"], [4], old, depths) == [index.displaced("r", 4, old)]
    # One entry further the walk reaches the head's last block, the oldest of the head:
    # passed over, with the rest of the head, where the plain walk counts it (½).
    assert index.displaced("r", 5) == 0.5
    assert index.displaced_list(["r"], [5], old, depths) == [index.displaced("r", 5, old)]
    assert index.displaced_list(["r"], [5], old, depths) == [0.0]


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
