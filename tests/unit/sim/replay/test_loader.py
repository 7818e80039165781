"""The real Mooncake conversation trace, as the simulator loads it (the repository's gzip
copy: a missing file fails this test rather than skipping it)."""

from __future__ import annotations

from routing.traces import load_trace
from sim.replay.blocks import engine_block_hashes, routing_prefix_hashes
from tests.support.public_traces import MOONCAKE as TRACE


def test_the_mooncake_conversation_trace_loads_whole() -> None:
    assert TRACE.is_file(), f"{TRACE} is missing: the repository keeps it in traces/"
    trace = load_trace(TRACE, "auto")
    assert len(trace) == 12_031
    first = trace[0]
    assert (first.arrival_s, first.input_tokens, first.output_tokens) == (0.0, 6758, 500)
    assert first.hash_ids == tuple(range(14)) and first.block_tokens == 512
    assert all(r.hash_ids[0] == 0 for r in trace)  # every request starts with block 0
    assert trace[-1].arrival_s == 3536.999
    # As the replay sees the first request: 422 engine blocks, 13 full routing blocks.
    assert len(engine_block_hashes(first, 16, salt=0)) == 6758 // 16
    assert routing_prefix_hashes(first) == tuple(range(13))
