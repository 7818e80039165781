from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable

import pytest
import xxhash

from scoring.state import prefix_hash
from scoring.state.prefix_hash import (
    GROUP,
    block_weight,
    covered_chars,
    hash_blocks,
    hash_blocks_reference,
    hash_fixed_blocks,
    prefix_seed,
)

DATA = random.Random(7).randbytes(40_000)


def _boundaries(n_bytes: int, block_chars: int) -> list[tuple[int, int]]:
    """Brute force: (start, end) of every full block, block i being block_chars × 2^(i//128)."""
    out: list[tuple[int, int]] = []
    pos = i = 0
    while True:
        end = pos + block_chars * 2 ** (i // GROUP)
        if end > n_bytes:
            return out
        out.append((pos, end))
        pos, i = end, i + 1


def test_golden_values() -> None:
    # A change here re-homes every cache entry of a running fleet: only change it on purpose.
    assert prefix_seed("m") == 5178285397344514768
    assert prefix_seed("m", "s") == 10940531276306512716
    fox = b"The quick brown fox jumps over the lazy dog"
    assert hash_blocks(fox, prefix_seed("m"), 16) == (9865146357010591978, 1062352293496635320)
    assert hash_blocks(bytes(range(256)), prefix_seed("llama"), 64) == (
        7974127557512153526,
        5314226186315993933,
        3284009999103537469,
        11146294237471373262,
    )


def test_chain_follows_the_documented_formula() -> None:
    seed = xxhash.xxh3_64_intdigest(b"my-model\x00salt")
    assert prefix_seed("my-model", "salt") == seed
    h0 = xxhash.xxh3_64_intdigest(DATA[:10], seed)
    h1 = xxhash.xxh3_64_intdigest(DATA[10:20], h0)
    assert hash_blocks(DATA[:25], seed, 10) == (h0, h1)


def test_only_full_blocks_are_hashed() -> None:
    seed = prefix_seed("m")
    assert hash_blocks(b"", seed, 64) == ()
    assert hash_blocks(DATA[:63], seed, 64) == ()
    assert len(hash_blocks(DATA[:64], seed, 64)) == 1
    assert len(hash_blocks(DATA[:127], seed, 64)) == 1
    assert len(hash_blocks(DATA[:128], seed, 64)) == 2
    # A trailing partial block changes nothing.
    assert hash_blocks(DATA[:191], seed, 64) == hash_blocks(DATA[:128], seed, 64)


def test_block_boundaries_double_after_each_group_of_128() -> None:
    block_chars = 3
    data = DATA[:5_000]  # three groups (384 + 768 + 1536 bytes) and part of a fourth
    bounds = _boundaries(len(data), block_chars)
    assert len(bounds) > 3 * GROUP
    assert bounds[GROUP - 1] == (381, 384) and bounds[GROUP] == (384, 390)
    assert bounds[2 * GROUP] == (384 + 768, 384 + 768 + 12)
    expected = []
    h = prefix_seed("m")
    for start, end in bounds:
        h = xxhash.xxh3_64_intdigest(data[start:end], h)
        expected.append(h)
    assert hash_blocks(data, prefix_seed("m"), block_chars) == tuple(expected)


def test_shared_prefix_shares_exactly_its_full_blocks() -> None:
    seed = prefix_seed("m")
    common = DATA[:1_000]  # 15 full 64-byte blocks, the 16th straddles the divergence
    a = hash_blocks(common + b"A" * 500, seed, 64)
    b = hash_blocks(common + b"B" * 500, seed, 64)
    assert len(a) == len(b) == 23
    assert a[:15] == b[:15]
    assert all(x != y for x, y in zip(a[15:], b[15:], strict=True))
    # Diverging on the first byte of a block: the blocks before it are shared.
    c = hash_blocks(DATA[:1_024] + b"C" * 100, seed, 64)
    d = hash_blocks(DATA[:1_024] + b"D" * 100, seed, 64)
    assert c[:16] == d[:16] and c[16] != d[16]


def test_model_and_cache_salt_change_every_hash() -> None:
    data = DATA[:4_000]
    variants = [
        hash_blocks(data, prefix_seed(model, salt), 64)
        for model, salt in [("m", None), ("m2", None), ("m", "tenant-1"), ("m", "tenant-2")]
    ]
    assert all(len(v) == 62 for v in variants)
    for i, v in enumerate(variants):
        for w in variants[i + 1 :]:
            assert not set(v) & set(w)
    # The separator keeps ("ab", "") apart from ("a", "b").
    assert prefix_seed("ab") != prefix_seed("a", "b")


@pytest.mark.parametrize("block_chars", [1, 3, 64])
def test_covered_chars_matches_the_real_boundaries(block_chars: int) -> None:
    for n in [*range(0, 300), 383, 384, 385, 640, 641, 700]:
        brute = sum(block_chars * block_weight(i) for i in range(n))
        assert covered_chars(n, block_chars) == brute, n
    data = DATA[: 1_000 * block_chars] if block_chars < 64 else DATA
    bounds = _boundaries(len(data), block_chars)
    for n in range(1, len(bounds) + 1):
        assert covered_chars(n, block_chars) == bounds[n - 1][1]
        # Exactly n blocks fit in covered_chars(n) bytes, and one byte less loses the last.
        if n in (1, 127, 128, 129, 255, 256, 257, len(bounds)):
            seed = prefix_seed("m")
            assert len(hash_blocks(data[: covered_chars(n, block_chars)], seed, block_chars)) == n
            assert len(hash_blocks(data[: bounds[n - 1][1] - 1], seed, block_chars)) == n - 1


def test_block_weight() -> None:
    positions = (0, 127, 128, 255, 256, 383, 384, 640)
    assert [block_weight(i) for i in positions] == [1, 1, 2, 2, 4, 4, 8, 32]


def test_block_chars_must_be_positive() -> None:
    with pytest.raises(ValueError, match="block_chars"):
        hash_blocks(DATA, 0, 0)


def test_hashing_a_128k_token_prompt() -> None:
    """Not a benchmark (no timed assertion): prints the median so regressions are visible."""
    data = random.Random(0).randbytes(512 * 1024)  # ~128k tokens at 4 bytes a token
    seed = prefix_seed("m")
    times = []
    for _ in range(50):
        start = time.perf_counter()
        hashes = hash_blocks(data, seed, 64)
        times.append(time.perf_counter() - start)
    assert len(hashes) == 770  # 6 groups of 128 cover 504 KiB, then two 4 KiB blocks
    print(f"hash_blocks(512 KiB): median {statistics.median(times) * 1e6:.0f} µs over 50 runs")


def test_fixed_blocks_chain_without_growth() -> None:
    seed = prefix_seed("m")
    fixed = hash_fixed_blocks(DATA, seed, 16)
    assert len(fixed) == len(DATA) // 16  # full blocks only, all 16 bytes
    assert fixed[:GROUP] == hash_blocks(DATA, seed, 16)[:GROUP]  # the same chain at first
    h = seed
    for i, got in enumerate(fixed):
        h = xxhash.xxh3_64_intdigest(DATA[16 * i : 16 * (i + 1)], h)
        assert got == h
    assert hash_fixed_blocks(DATA[: 40_000 - 5], seed, 16) == fixed[:-1]  # a partial block: no id
    assert hash_fixed_blocks(b"short", seed, 16) == ()
    with pytest.raises(ValueError):
        hash_fixed_blocks(DATA, seed, 0)


def _reference_hashes(data: bytes, seed: int, block_chars: int, *, grow: bool) -> tuple[int, ...]:
    """The chain spelled out one slice at a time, as the module docstring states it."""
    hashes: list[int] = []
    h, pos, i = seed, 0, 0
    while True:
        size = block_chars << (i // GROUP) if grow else block_chars
        if pos + size > len(data):
            return tuple(hashes)
        h = xxhash.xxh3_64_intdigest(data[pos : pos + size], h)
        hashes.append(h)
        pos, i = pos + size, i + 1


def _lengths(block_chars: int, max_len: int, rng: random.Random) -> list[int]:
    """0, 1, every block end ±1 near group edges (grown and fixed layouts), and random lengths."""
    edges = {0, 1, 2, block_chars * GROUP}
    for n in range(1, 4096):
        end = covered_chars(n, block_chars)
        if end > max_len:
            break
        if n % GROUP in (0, 1, GROUP - 1) or n < 3:
            edges.update((end - 1, end, end + 1))
    for n in (1, GROUP - 1, GROUP, GROUP + 1, 2 * GROUP, 5 * GROUP + 3):
        edges.update((n * block_chars - 1, n * block_chars, n * block_chars + 1))
    edges.update(rng.randrange(max_len) for _ in range(40))
    return sorted(n for n in edges if 0 <= n <= max_len)


@pytest.mark.parametrize(
    ("function", "grow", "block_chars", "max_len"),
    [
        (hash_blocks, True, 1, 600_000),
        (hash_blocks, True, 3, 600_000),
        (hash_blocks, True, 64, 600_000),
        (hash_fixed_blocks, False, 1, 3_000),
        (hash_fixed_blocks, False, 3, 20_000),
        (hash_fixed_blocks, False, 64, 600_000),
    ],
)
def test_hashes_match_a_slice_by_slice_reference(
    function: Callable[[bytes, int, int], tuple[int, ...]],
    grow: bool,
    block_chars: int,
    max_len: int,
) -> None:
    rng = random.Random(block_chars)
    data = rng.randbytes(max_len)
    for n in _lengths(block_chars, max_len, rng):
        seed = rng.getrandbits(64)
        expected = _reference_hashes(data[:n], seed, block_chars, grow=grow)
        assert function(data[:n], seed, block_chars) == expected, n


class _Huge(bytes):
    """Claims a length past the precomputed layout; never read that far."""

    def __len__(self) -> int:
        return 10**15


def test_too_long_and_bad_block_sizes_are_rejected() -> None:
    with pytest.raises(ValueError, match="too long"):  # the compiled one reads the real length
        hash_blocks_reference(_Huge(), 0, 1)
    for block_chars in (0, -1):
        with pytest.raises(ValueError, match="block_chars"):
            hash_blocks(DATA, 0, block_chars)
        with pytest.raises(ValueError, match="block_chars"):
            hash_fixed_blocks(DATA, 0, block_chars)


def test_common_prefix_counts_the_equal_items_from_two_starts() -> None:
    a = (1, 2, 3, 4, 5, 6)
    assert prefix_hash.common_prefix_reference(a, 0, a, 0, 6) == 6
    assert prefix_hash.common_prefix_reference(a, 2, (9, 3, 4, 5, 0), 1, 4) == 3
    assert prefix_hash.common_prefix_reference(a, 0, (7, 2, 3), 0, 3) == 0
    assert prefix_hash.common_prefix_reference(a, 5, (6,), 0, 1) == 1
    assert prefix_hash.common_prefix_reference(a, 6, (), 0, 0) == 0
    long = tuple(range(100))
    assert prefix_hash.common_prefix_reference(long, 0, (*range(70), -1), 0, 71) == 70
    with pytest.raises(IndexError):
        prefix_hash.common_prefix_reference(a, 0, a, 0, 7)
