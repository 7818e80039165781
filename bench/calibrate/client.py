"""The HTTP side of a measurement: streamed completions timed on the client, and server facts.

Prompts go to /v1/completions as token ids, so prompt lengths and shared prefixes are exact to
the token (no tokenizer round trip can merge a prefix's last token with the suffix); the server
confirms each length in `usage.prompt_tokens`. `continuous_usage_stats` puts the running
completion-token count in every chunk, so a chunk that carries several tokens is seen as such.
"""

from __future__ import annotations

import json
import re
import time
from typing import Any

import httpx

from bench.calibrate.records import RequestRecord

# Histograms whose _sum and _count vLLM keeps per engine. ITL and the request intervals use
# the engine core's own timestamps, so they are free of delays between engine and client.
SERVER_HISTOGRAMS = (
    "inter_token_latency_seconds",
    "time_to_first_token_seconds",
    "request_queue_time_seconds",
    "request_prefill_time_seconds",
    "request_decode_time_seconds",
    "e2e_request_latency_seconds",
)
_INFO_LINE = re.compile(r"^vllm:cache_config_info\{(?P<labels>[^}]*)\}", re.MULTILINE)
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


async def stream_completion(
    client: httpx.AsyncClient,
    model: str,
    prompt_ids: list[int],
    max_tokens: int,
    *,
    index: int,
    burst_start: float,
) -> RequestRecord:
    """Send one streaming completion and time every chunk (perf_counter, client side)."""
    body = {
        "model": model,
        "prompt": prompt_ids,
        "max_tokens": max_tokens,
        "min_tokens": max_tokens,
        "ignore_eos": True,
        "temperature": 0.0,
        "skip_special_tokens": False,
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    }
    sent = time.perf_counter()
    chunks: list[tuple[float, int]] = []
    usage: dict[str, Any] = {}
    async with client.stream("POST", "/v1/completions", json=body) as resp:
        if resp.status_code != 200:
            await resp.aread()
            raise RuntimeError(f"completion failed: {resp.status_code} {resp.text[:300]}")
        async for line in resp.aiter_lines():
            if not line.startswith("data: "):
                continue
            now = time.perf_counter()
            payload = line[6:]
            if payload == "[DONE]":
                break
            data = json.loads(payload)
            usage = data.get("usage") or usage
            if data.get("choices"):
                tokens = int(usage.get("completion_tokens", len(chunks) + 1))
                if not chunks or tokens > chunks[-1][1]:
                    chunks.append((now - sent, tokens))
    if not chunks:
        raise RuntimeError("stream ended without a token")
    details = usage.get("prompt_tokens_details") or {}
    return RequestRecord(
        index=index,
        prompt_tokens=int(usage.get("prompt_tokens", len(prompt_ids))),
        cached_tokens=int(details.get("cached_tokens") or 0),
        completion_tokens=int(usage.get("completion_tokens", chunks[-1][1])),
        sent_s=sent - burst_start,
        chunks=tuple(chunks),
    )


async def model_id(client: httpx.AsyncClient) -> str:
    resp = await client.get("/v1/models")
    resp.raise_for_status()
    name: str = resp.json()["data"][0]["id"]
    return name


async def tokenize_count(client: httpx.AsyncClient, model: str, text: str) -> int:
    resp = await client.post("/tokenize", json={"model": model, "prompt": text})
    resp.raise_for_status()
    count: int = resp.json()["count"]
    return count


async def cache_config(client: httpx.AsyncClient) -> dict[str, str]:
    """Labels of `vllm:cache_config_info` (block_size, num_gpu_blocks, ...) from /metrics."""
    resp = await client.get("/metrics")
    resp.raise_for_status()
    match = _INFO_LINE.search(resp.text)
    if match is None:
        raise RuntimeError("no vllm:cache_config_info in /metrics")
    return dict(_LABEL.findall(match.group("labels")))


async def server_histograms(client: httpx.AsyncClient) -> dict[str, float]:
    """`NAME_sum` and `NAME_count` of each of SERVER_HISTOGRAMS, summed over label sets."""
    resp = await client.get("/metrics")
    resp.raise_for_status()
    out: dict[str, float] = {}
    for name in SERVER_HISTOGRAMS:
        for part in ("sum", "count"):
            key = f"{name}_{part}"
            pattern = re.compile(rf"^vllm:{key}(?:\{{[^}}]*\}})? (\S+)$", re.MULTILINE)
            out[key] = sum(float(v) for v in pattern.findall(resp.text))
    return out
