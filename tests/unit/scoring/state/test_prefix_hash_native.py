"""The compiled chained block hashes against their Python references."""

from __future__ import annotations

import gc

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scoring.state import prefix_hash
from scoring.state.prefix_hash import GROUP, hash_blocks_reference, hash_fixed_blocks_reference

native = pytest.importorskip("scoring.state.prefix_hash_native")

seeds = st.integers(0, 2**64 - 1)
sizes = st.sampled_from([1, 2, 3, 16, 63, 64, 65, 240, 241])  # XXH3's length classes at 64


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=4_000), seeds, sizes)
def test_both_chains_equal_the_reference(data: bytes, seed: int, block_chars: int) -> None:
    assert native.hash_blocks(data, seed, block_chars) == hash_blocks_reference(
        data, seed, block_chars
    )
    assert native.hash_fixed_blocks(data, seed, block_chars) == hash_fixed_blocks_reference(
        data, seed, block_chars
    )


@pytest.mark.parametrize("extra", [-1, 0, 1, 300])
def test_growing_blocks_across_group_boundaries(extra: int) -> None:
    # GROUP blocks of 16 bytes, GROUP of 32, GROUP of 64, then part of the next group of 128.
    data = bytes(range(256)) * 100
    length = 16 * GROUP * (1 + 2 + 4) + extra
    assert native.hash_blocks(data[:length], 7, 16) == hash_blocks_reference(data[:length], 7, 16)


def test_other_buffers_and_bad_sizes_behave_as_the_reference() -> None:
    data = b"abc" * 100
    assert native.hash_blocks(memoryview(data), 1, 8) == hash_blocks_reference(data, 1, 8)
    assert native.hash_blocks(bytearray(data), 1, 8) == hash_blocks_reference(data, 1, 8)
    for chain in (native.hash_blocks, native.hash_fixed_blocks):
        with pytest.raises(ValueError, match="block_chars"):
            chain(data, 1, 0)


def test_the_module_uses_the_compiled_chain_where_built() -> None:
    assert prefix_hash.hash_blocks is native.hash_blocks
    assert prefix_hash.hash_fixed_blocks is native.hash_fixed_blocks


def test_untracked_takes_tuples_of_ints_out_of_the_collector_only() -> None:
    ints = tuple([1, 2, 3, 2**64 - 1])  # built at run time: tracked
    assert gc.is_tracked(ints)
    assert native.untracked(ints) is ints and not gc.is_tracked(ints)
    mixed = tuple([1, [2]])
    assert native.untracked(mixed) is mixed and gc.is_tracked(mixed)
    assert not gc.is_tracked(native.hash_blocks(b"x" * 640, 3, 64))
    numbers = {1, 2.5}  # a set of numbers too, and it stays out as it grows
    assert native.untracked(numbers) is numbers and not gc.is_tracked(numbers)
    numbers.add(3)
    assert not gc.is_tracked(numbers)
    assert gc.is_tracked(native.untracked({1, "two"}))
    assert prefix_hash.untracked is native.untracked


# Two sequences with a common stretch, then anything (repeats and None included, as the
# simulator's block lists have).
_items = st.one_of(st.integers(0, 5), st.none(), st.integers(2**62, 2**62 + 3))


@settings(max_examples=400, deadline=None)
@given(
    st.lists(_items, max_size=300),
    st.lists(_items, max_size=80),
    st.lists(_items, max_size=80),
    st.integers(0, 40),
    st.integers(0, 40),
    st.booleans(),
)
def test_common_prefix_equals_the_reference(
    shared: list[int | None],
    a_rest: list[int | None],
    b_rest: list[int | None],
    i: int,
    j: int,
    as_tuples: bool,
) -> None:
    a = [*a_rest[:i], *shared, *a_rest]
    b = [*b_rest[:j], *shared, *b_rest]
    i, j = min(i, len(a)), min(j, len(b))
    if as_tuples:
        a, b = tuple(a), tuple(b)  # type: ignore[assignment]
    limit = min(len(a) - i, len(b) - j)
    for n in (limit, limit // 2, 0):
        assert native.common_prefix(a, i, b, j, n) == prefix_hash.common_prefix_reference(
            a, i, b, j, n
        )
    for bad in ((-1, j, 0), (i, j, limit + 1)):
        with pytest.raises(IndexError):
            native.common_prefix(a, bad[0], b, bad[1], bad[2])
        with pytest.raises(IndexError):
            prefix_hash.common_prefix_reference(a, bad[0], b, bad[1], bad[2])


def test_the_module_uses_the_compiled_common_prefix_where_built() -> None:
    assert prefix_hash.common_prefix is native.common_prefix
