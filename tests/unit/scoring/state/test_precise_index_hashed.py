"""The precise index keys blocks stored without token ids by their engine hashes."""

from __future__ import annotations

from routing.kv_events import BlockRemoved, BlockStored
from scoring.state.precise_index import PreciseIndex


def _stored(
    hashes: tuple[int, ...], parent: int | None, tokens: tuple[int, ...] = ()
) -> BlockStored:
    return BlockStored(
        block_hashes=hashes,
        parent_block_hash=parent,
        token_ids=tokens,
        block_size=4,
        lora_id=None,
        medium="GPU",
        lora_name=None,
    )


def test_hash_only_blocks_are_keyed_by_their_engine_hashes() -> None:
    index = PreciseIndex()
    index.apply("a", [_stored((11, 12), None), _stored((13,), 12)], "m")
    assert index.blocks("a") == 3
    assert index.depth("a", (11, 12, 13, 99)) == 3
    assert index.depth("a", (12, 13)) == 2  # the hash names the whole prefix: no chain check
    index.apply("a", [BlockRemoved((12,))], "m")
    assert index.depth("a", (11, 12, 13)) == 1
    counters = index.counters("a")
    assert counters is not None
    assert (counters.stored_blocks, counters.removed_blocks, counters.orphaned_blocks) == (3, 1, 0)


def test_hash_only_runs_under_an_unknown_parent_are_kept() -> None:
    index = PreciseIndex()
    index.apply("a", [_stored((21,), 20)], "m")
    assert index.depth("a", (21,)) == 1


def test_short_token_ids_are_still_orphaned() -> None:
    index = PreciseIndex()
    index.apply("a", [_stored((31, 32), None, tokens=(1, 2, 3, 4))], "m")
    counters = index.counters("a")
    assert counters is not None
    assert counters.orphaned_blocks == 2
    assert index.blocks("a") == 0
