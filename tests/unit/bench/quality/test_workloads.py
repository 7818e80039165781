"""The quality benchmark's workloads and fleets; no sockets."""

from __future__ import annotations

from pathlib import Path

import orjson

from bench.quality.workloads import MAX_CONTEXT, MODEL, mooncake, synthetic


def test_synthetic_chats_run_closed_loop_on_the_demo_profile() -> None:
    workload, fleet = synthetic(conversations=5, rate=2.0, seed=1, replicas=3)
    assert (workload.name, workload.requests) == ("synthetic", 20)
    assert (fleet.replicas, fleet.profile, fleet.model, fleet.speedup) == (3, "demo", MODEL, 1.0)


def test_mooncake_slice_drops_requests_past_the_context(tmp_path: Path) -> None:
    rows = [
        {"timestamp": 0, "input_length": 600, "output_length": 50, "hash_ids": [0, 1]},
        {"timestamp": 10, "input_length": MAX_CONTEXT, "output_length": 5, "hash_ids": [2]},
        {"timestamp": 20, "input_length": 700, "output_length": 3, "hash_ids": [0, 3]},
    ]
    trace = tmp_path / "mooncake.jsonl"
    trace.write_bytes(b"\n".join(orjson.dumps(r) for r in rows))
    workload, fleet = mooncake(trace, count=3, rate_scale=1.0, max_output=16, replicas=2)
    assert (workload.name, workload.requests) == ("mooncake", 2)
    assert fleet.profile == "h100-llama3-8b" and fleet.speedup == 0.1
    assert fleet.extra_args[-2:] == ("--max-model-len", str(MAX_CONTEXT))
