from __future__ import annotations

from routing.traces import TraceRequest
from scoring.state.prefix_hash import blocks_covered_by as routing_blocks_within
from scoring.state.prefix_hash import covered_chars
from sim.replay.blocks import engine_block_hashes, routing_prefix_hashes


def _request(ids: list[int], tokens: int, block_tokens: int = 512) -> TraceRequest:
    return TraceRequest(0.0, tokens, 10, tuple(ids), block_tokens)


def test_each_trace_block_is_32_engine_blocks_and_shared_ids_share_them() -> None:
    a = engine_block_hashes(_request([0, 1, 2], 3 * 512), 16, salt=1)
    b = engine_block_hashes(_request([0, 1, 7, 8], 3 * 512 + 100), 16, salt=2)
    assert len(a) == 96 and len(b) == 96 + 6  # only full engine blocks: 100 // 16 = 6
    assert a[:64] == b[:64] and set(a[64:]).isdisjoint(b[64:])
    assert len(set(a) | set(b)) == 96 + 38


def test_a_partial_last_trace_block_gives_its_full_engine_blocks() -> None:
    hashes = engine_block_hashes(_request([0, 5], 512 + 40), 16, salt=0)
    assert len(hashes) == 34
    assert hashes[32:] == engine_block_hashes(_request([0, 5], 512 + 47), 16, salt=9)[32:]


def test_blocks_the_ids_do_not_name_are_the_requests_own() -> None:
    bare = _request([], 100)  # an Azure trace: no ids at all
    assert engine_block_hashes(bare, 16, salt=1) != engine_block_hashes(bare, 16, salt=2)
    covered = engine_block_hashes(_request([3], 512 + 64), 16, salt=1)
    assert len(covered) == 36 and covered[:32] == engine_block_hashes(_request([3], 512), 16, 5)


def test_trace_blocks_that_are_not_a_multiple_of_the_engine_block() -> None:
    # 24-token trace blocks, 16-token engine blocks: engine block b is named by the trace
    # block holding its last token.
    a = engine_block_hashes(_request([1, 2, 3, 4], 96, block_tokens=24), 16, salt=0)
    b = engine_block_hashes(_request([1, 2, 9, 10], 96, block_tokens=24), 16, salt=1)
    assert len(a) == 6
    assert a[:3] == b[:3] and a[3] != b[3]  # block 2 ends at token 47, in trace block 1


def test_routing_hashes_follow_the_gateways_growing_block_schedule() -> None:
    ids = list(range(1000, 1300))
    request = _request(ids, 300 * 512 - 1)  # the last trace block is partial
    hashes = routing_prefix_hashes(request)
    assert hashes[:128] == tuple(ids[:128])
    # Then blocks of 2 trace blocks, named by the second: 171 full ones make 85 pairs.
    assert hashes[128:] == tuple(ids[129:299:2])
    chars = covered_chars(len(hashes), 512 * 4)
    assert chars / 4 == (128 + 170) * 512
    assert routing_prefix_hashes(_request(ids[:10], 10 * 512)) == tuple(ids[:10])


def test_routing_blocks_within_inverts_the_schedule() -> None:
    for blocks in (0, 1, 127, 128, 129, 300, 1000):
        base = covered_chars(blocks, 1)
        assert routing_blocks_within(base) == blocks
        assert routing_blocks_within(base + 1) in (blocks, blocks + 1)
