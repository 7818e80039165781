import pytest

from routing.kv_events import AllBlocksCleared, BlockRemoved, BlockStored
from scoring.state.precise_index import PreciseIndex, cached_tokens
from scoring.state.token_blocks import root_key, token_block_keys

B = 16
IDS = tuple(range(1000, 1000 + 5 * B))  # five full blocks
KEYS = token_block_keys(IDS, B, root_key("m"))


def stored(hashes: tuple[int, ...], parent: int | None, ids: tuple[int, ...], **kw: object
           ) -> BlockStored:  # fmt: skip
    return BlockStored(hashes, parent, ids, B, **kw)  # type: ignore[arg-type]


def test_stored_runs_chain_from_their_parent() -> None:
    index = PreciseIndex()
    index.apply("a", [stored((1, 2), None, IDS[: 2 * B])], "m")
    index.apply("a", [stored((3, 4, 5), 2, IDS[2 * B :])], "m")
    assert index.depth("a", KEYS) == 5
    assert index.blocks("a") == 5
    assert index.depth("b", KEYS) == 0 and not index.tracks("b")
    assert index.block_size("a") == B and index.block_sizes() == {B}


def test_removal_stops_the_match_at_the_hole() -> None:
    index = PreciseIndex()
    index.apply("a", [stored((1, 2, 3, 4, 5), None, IDS)], "m")
    index.apply("a", [BlockRemoved((3,))], "m")
    assert index.depth("a", KEYS) == 2  # the engine's lookup stops at the first miss
    index.apply("a", [BlockRemoved((99,))], "m")
    counters = index.counters("a")
    assert counters is not None and counters.unknown_removals == 1
    assert counters.removed_blocks == 1


def test_a_hash_stored_twice_needs_two_removals() -> None:
    index = PreciseIndex()
    index.apply("a", [stored((1,), None, IDS[:B]), stored((1,), None, IDS[:B])], "m")
    index.apply("a", [BlockRemoved((1,))], "m")
    assert index.depth("a", KEYS) == 1
    index.apply("a", [BlockRemoved((1,))], "m")
    assert index.depth("a", KEYS) == 0


def test_unknown_parent_and_salted_runs_are_orphans() -> None:
    index = PreciseIndex()
    index.apply("a", [stored((7,), 12345, IDS[B : 2 * B])], "m")
    index.apply("a", [stored((8,), None, IDS[:B], salted=True)], "m")
    counters = index.counters("a")
    assert counters is not None and counters.orphaned_blocks == 2
    assert index.blocks("a") == 0


def test_lora_blocks_root_at_the_adapter() -> None:
    index = PreciseIndex()
    index.apply("a", [stored((1,), None, IDS[:B], lora_id=1, lora_name="ad")], "m")
    assert index.depth("a", KEYS) == 0
    assert index.depth("a", token_block_keys(IDS, B, root_key("ad"))) == 1


def test_clear_and_reset_empty_a_backend() -> None:
    index = PreciseIndex()
    index.apply("a", [stored((1, 2), None, IDS[: 2 * B])], "m")
    index.apply("a", [AllBlocksCleared()], "m")
    assert index.depth("a", KEYS) == 0
    index.apply("a", [stored((1, 2), None, IDS[: 2 * B])], "m")
    index.reset("a")
    assert index.depth("a", KEYS) == 0 and index.tracks("a")
    index.remove_backend("a")
    assert not index.tracks("a")


def test_speculation_counts_until_expiry_or_storage() -> None:
    index = PreciseIndex(speculative_ttl_s=2.0)
    index.apply("a", [stored((1,), None, IDS[:B])], "m")
    index.speculate("a", KEYS, now=10.0)
    assert index.depth("a", KEYS) == 1  # without a time: events only
    assert index.depth("a", KEYS, now=11.0) == 5
    assert index.depth("a", KEYS, now=12.5) == 1
    index.speculate("b", KEYS, now=10.0)  # an untracked backend gains nothing
    assert index.depth("b", KEYS, now=10.5) == 0


def test_cached_tokens_leaves_the_last_token_to_compute() -> None:
    assert cached_tokens(5, 5 * B, B) == 4 * B
    assert cached_tokens(5, 5 * B + 1, B) == 5 * B
    assert cached_tokens(2, 5 * B + 1, B) == 2 * B
    assert cached_tokens(3, 0, B) == 0


def test_bad_ttl() -> None:
    with pytest.raises(ValueError):
        PreciseIndex(speculative_ttl_s=-1)
