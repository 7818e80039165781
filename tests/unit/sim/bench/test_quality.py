"""The quality benchmark's prompt synthesis and target verdicts; no sockets."""

from __future__ import annotations

from typing import Any

from sim.bench.quality_report import targets
from sim.bench.workloads import text_prompt
from sim.engine.tokenizer import BuiltinTokenizer


def test_text_prompt_reads_back_as_one_word_per_id_and_keeps_shared_prefixes() -> None:
    tokenizer = BuiltinTokenizer()
    vocabulary = [piece for _, piece in tokenizer.generation_vocabulary()]
    a = text_prompt([5000, 7, 123456, 42], vocabulary)
    b = text_prompt([5000, 7, 99], vocabulary)
    assert len(tokenizer.encode(a)) == 4
    ids_a, ids_b = tokenizer.encode(a), tokenizer.encode(b)
    assert ids_a[:2] == ids_b[:2]
    assert ids_a[2] != ids_b[2]


def _row(workload: str, router: str, policy: str, mean: float, p90: float, hit: float) -> Any:
    return {
        "workload": workload,
        "router": router,
        "policy": policy,
        "ttft_mean_s": mean,
        "ttft_p90_s": p90,
        "hit_rate": hit,
    }


def test_targets_compare_kvgate_with_sglang_and_round_robin_per_workload() -> None:
    rows = [
        _row("w", "kvgate", "prefix-aware", 1.0, 2.0, 0.5),
        _row("w", "kvgate", "round-robin", 4.0, 3.0, 0.1),
        _row("w", "sglang-router", "cache_aware", 1.25, 2.4, 0.6),
    ]
    verdicts = {t["target"]: (round(t["value"], 3), t["met"]) for t in targets(rows)}
    assert verdicts == {
        "ttft_mean_s kvgate/sglang-router cache_aware <= 0.8": (0.8, True),
        "ttft_p90_s kvgate/sglang-router cache_aware <= 0.8": (0.833, False),
        "ttft_mean_s kvgate/kvgate round-robin <= 0.5": (0.25, True),
        "ttft_p90_s kvgate/kvgate round-robin <= 0.5": (0.667, False),
        "hit_rate kvgate >= sglang-router cache_aware": (-0.1, False),
    }


def test_no_targets_without_kvgate_prefix_aware() -> None:
    assert targets([_row("w", "kvgate", "round-robin", 1.0, 1.0, 0.1)]) == []
