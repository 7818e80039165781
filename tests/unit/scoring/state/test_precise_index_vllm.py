"""Precise-index cases seen against real vLLM 0.32 (`make test-vllm`)."""

from routing.kv_events import BlockRemoved, BlockStored
from scoring.state.precise_index import PreciseIndex
from scoring.state.token_blocks import root_key, token_block_keys

B = 16
IDS = tuple(range(1000, 1000 + 5 * B))  # five full blocks
KEYS = token_block_keys(IDS, B, root_key("m"))


def stored(hashes: tuple[int, ...], parent: int | None, ids: tuple[int, ...]) -> BlockStored:
    return BlockStored(hashes, parent, ids, B)


def test_reannounced_hits_add_no_reference() -> None:
    """A request with kv_cache_report_mode "full" makes vLLM announce its cache hits again (a
    root run of held blocks); one eviction of each block must still empty the index (seen:
    keys held long after vLLM evicted them, predictions of cached tokens that were not)."""
    index = PreciseIndex()
    index.apply("a", [stored((1, 2), None, IDS[: 2 * B])], "m")
    again = [stored((1, 2), None, IDS[: 2 * B]), stored((3,), 2, IDS[2 * B : 3 * B])]
    index.apply("a", again, "m")
    assert index.depth("a", KEYS) == 3
    index.apply("a", [BlockRemoved((1,)), BlockRemoved((2,))], "m")
    assert index.depth("a", KEYS) == 0
    counters = index.counters("a")
    assert counters is not None and counters.reannounced_blocks == 2


def test_a_recomputed_last_block_is_a_second_copy() -> None:
    """A prompt all cached recomputes its last block into a second physical block with the
    same hash (stored again, under its parent); each copy is evicted on its own."""
    index = PreciseIndex()
    index.apply("a", [stored((1, 2), None, IDS[: 2 * B])], "m")
    index.apply("a", [stored((2,), 1, IDS[B : 2 * B])], "m")
    index.apply("a", [BlockRemoved((2,))], "m")
    assert index.depth("a", KEYS) == 2
    index.apply("a", [BlockRemoved((2,))], "m")
    assert index.depth("a", KEYS) == 1
