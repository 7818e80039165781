"""Making a vLLM server's prefix cache cold, against an in-memory fake (no sockets)."""

from __future__ import annotations

import json
import random

import httpx
import pytest

from bench.vllm_pressure import fleet
from bench.vllm_pressure.fleet import ColdCacheError, make_cold, parse_cache_config

URL = "http://vllm"


class FakeVllm:
    """Completions report as cached the prompts seen since the last reset; a reset fails
    `busy` times first, and with `broken` reports success without forgetting anything."""

    def __init__(
        self, *, busy: int = 0, broken: bool = False, dev_mode: bool = True, caching: bool = True
    ) -> None:
        self.seen: set[tuple[int, ...]] = set()
        self.busy, self.broken, self.dev_mode, self.caching = busy, broken, dev_mode, caching
        self.resets = 0

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/reset_prefix_cache":
            if not self.dev_mode:
                return httpx.Response(404)
            if self.busy:
                self.busy -= 1
                return httpx.Response(200, json={"success": False})
            self.resets += 1
            if not self.broken:
                self.seen.clear()
            return httpx.Response(200, json={"success": True})
        prompt = tuple(json.loads(request.content)["prompt"])
        cached = len(prompt) // 32 * 32 if prompt in self.seen and self.caching else 0
        self.seen.add(prompt)
        usage = {"prompt_tokens": len(prompt), "prompt_tokens_details": {"cached_tokens": cached}}
        return httpx.Response(200, json={"usage": usage})


def _cold(fake: FakeVllm) -> None:
    with httpx.Client(transport=httpx.MockTransport(fake)) as client:
        make_cold(client, URL, "m", random.Random(0))


def test_a_working_reset_leaves_the_cache_empty(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fleet, "RESET_BACKOFF_S", 0.0)
    fake = FakeVllm(busy=1)  # the first reset is refused, then retried
    _cold(fake)
    assert fake.seen == set() and fake.resets == 2


def test_a_reset_that_forgets_nothing_stops_the_run() -> None:
    with pytest.raises(ColdCacheError, match="still cached"):
        _cold(FakeVllm(broken=True))


def test_without_prefix_caching_the_check_cannot_work() -> None:
    with pytest.raises(ColdCacheError, match="not cached"):
        _cold(FakeVllm(caching=False))


def test_without_dev_mode_there_is_no_reset() -> None:
    with pytest.raises(ColdCacheError, match="VLLM_SERVER_DEV_MODE"):
        _cold(FakeVllm(dev_mode=False))


def test_cache_config_labels_from_the_metrics_page() -> None:
    text = (
        "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig\n"
        "# TYPE vllm:cache_config_info gauge\n"
        'vllm:cache_config_info{block_size="32",engine="0",num_gpu_blocks="96"} 1.0\n'
    )
    labels = parse_cache_config(text)
    assert labels["num_gpu_blocks"] == "96" and labels["block_size"] == "32"
    with pytest.raises(ValueError):
        parse_cache_config("# nothing here\n")
