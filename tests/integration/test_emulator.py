"""Fidelity of the emulated replica over HTTP: cache hits, timing, KV usage, speedup, errors."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import replace

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from sim.emulator.app import EmulatorApp
from sim.emulator.replica import Replica
from sim.engine.profiles import get_profile
from sim.engine.tokenizer import BuiltinTokenizer
from sim.engine.types import EngineConfig, EngineProfile, StepTimeCoefficients
from sim.workloads import synth_text
from tests.support.fixture_types import ServeApp
from tests.support.servers import ServerThread

MODEL = "emu"
# Slow prefill, so cache and queue effects dwarf the noise of a shared machine.
TIMING = StepTimeCoefficients(
    overhead_s=0.002,
    prefill_token_s=0.0004,
    attention_s=0.0,
    decode_seq_s=0.0005,
    kv_read_token_s=0.0,
)
CONFIG = EngineConfig(
    block_size=16,
    num_blocks=512,
    max_num_seqs=16,
    max_num_batched_tokens=4096,
    max_model_len=4096,
)

StartReplica = Callable[..., tuple[Replica, ServerThread]]


@pytest.fixture
def start_replica(serve_app: ServeApp) -> StartReplica:
    def start(
        config: EngineConfig = CONFIG, timing: StepTimeCoefficients = TIMING, speedup: float = 1.0
    ) -> tuple[Replica, ServerThread]:
        profile = EngineProfile("test", "test profile", "tests", config, timing)
        replica = Replica(profile, MODEL, speedup)
        return replica, serve_app(EmulatorApp(replica, BuiltinTokenizer()), lifespan="on")

    return start


def _text(seed: int, tokens: int) -> str:
    import random

    return synth_text(random.Random(seed), tokens)


def _complete(url: str, prompt: str, max_tokens: int = 2, **kw: object) -> httpx.Response:
    body = {"model": MODEL, "prompt": prompt, "max_tokens": max_tokens, **kw}
    return httpx.post(url + "/v1/completions", json=body, timeout=60)


def _ttft(url: str, prompt: str) -> float:
    start = time.monotonic()
    body = {"model": MODEL, "prompt": prompt, "max_tokens": 2, "stream": True}
    with httpx.stream("POST", url + "/v1/completions", json=body, timeout=60) as r:
        for line in r.iter_lines():
            if line.startswith("data: {"):
                return time.monotonic() - start
    raise AssertionError("no token")


def _metrics(url: str) -> dict[str, float]:
    out: dict[str, float] = {}
    text = httpx.get(url + "/metrics").text
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            key = s.name + (
                "{"
                + ",".join(
                    f"{k}={v}"
                    for k, v in sorted(s.labels.items())
                    if k not in {"engine", "model_name"}
                )
                + "}"
                if set(s.labels) - {"engine", "model_name"}
                else ""
            )
            out[key] = s.value
    return out


def test_metrics_carry_vllm_names_and_parse(start_replica: StartReplica) -> None:
    _, srv = start_replica()
    assert _complete(srv.url, _text(1, 100)).status_code == 200
    text = httpx.get(srv.url + "/metrics").text
    families = {f.name: f for f in text_string_to_metric_families(text)}
    for name in (
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc",
        "vllm:cache_config_info",
    ):
        assert families[name].type == "gauge", name
    for name in (
        "vllm:prefix_cache_queries",
        "vllm:prefix_cache_hits",
        "vllm:prompt_tokens",
        "vllm:generation_tokens",
        "vllm:num_preemptions",
    ):
        assert families[name].type == "counter", name
    for name in (
        "vllm:time_to_first_token_seconds",
        "vllm:inter_token_latency_seconds",
        "vllm:e2e_request_latency_seconds",
    ):
        assert families[name].type == "histogram", name
    [info] = families["vllm:cache_config_info"].samples
    assert info.labels["block_size"] == "16" and info.labels["num_gpu_blocks"] == "512"
    running = families["vllm:num_requests_running"].samples[0]
    assert running.labels == {"engine": "0", "model_name": MODEL}


def test_repeated_prompt_is_a_cache_hit_and_metrics_agree(start_replica: StartReplica) -> None:
    _, srv = start_replica()
    prompt = _text(2, 300)
    first = _complete(srv.url, prompt).json()["usage"]
    assert first["prompt_tokens_details"]["cached_tokens"] == 0
    second = _complete(srv.url, prompt).json()["usage"]
    n = second["prompt_tokens"]
    cached = second["prompt_tokens_details"]["cached_tokens"]
    assert cached == (n - 1) // 16 * 16  # whole blocks, never the last prompt token
    m = _metrics(srv.url)
    assert m["vllm:prefix_cache_hits_total"] == cached
    assert m["vllm:prefix_cache_queries_total"] == 2 * n


# Prefill slow enough (1 ms a token) that the modelled times stand well above what a loaded
# machine adds to one HTTP exchange; the checks compare differences, which that noise
# shifts far less than ratios.
SLOW_PREFILL = replace(TIMING, prefill_token_s=0.001)


def test_ttft_grows_with_uncached_tokens(start_replica: StartReplica) -> None:
    _, srv = start_replica(timing=SLOW_PREFILL)
    short = _ttft(srv.url, _text(3, 100))
    long = _ttft(srv.url, _text(4, 1500))
    prompt = _text(5, 1500)
    _complete(srv.url, prompt)
    cached = _ttft(srv.url, prompt)
    modelled = 1400 * SLOW_PREFILL.prefill_token_s  # ~1.4 s more prefill for the long prompt
    assert long - short > 0.7 * modelled
    assert long - cached > 0.7 * modelled  # the cached prompt prefills one block at most


def test_ttft_grows_with_queue_depth(start_replica: StartReplica) -> None:
    _, srv = start_replica(config=replace(CONFIG, max_num_seqs=1), timing=SLOW_PREFILL)
    ttfts: dict[int, float] = {}

    def one(i: int) -> None:
        time.sleep(0.2 * i)  # arrive spread out, each while an earlier one still prefills
        ttfts[i] = _ttft(srv.url, _text(100 + i, 800))

    threads = [threading.Thread(target=one, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # One sequence at a time, ~0.8 s of prefill each: whatever order they reached the
    # engine in, the last served waited for three others (~2.4 s, less its later start).
    waits = sorted(ttfts.values())
    assert waits[-1] - waits[0] > 3 * 0.8 - 3 * 0.2 - 0.6, ttfts
    assert waits[-1] > 2 * waits[0], ttfts


def test_kv_usage_rises_with_concurrent_long_prompts(start_replica: StartReplica) -> None:
    slow_decode = replace(TIMING, decode_seq_s=0.01)
    _, srv = start_replica(timing=slow_decode)
    assert _metrics(srv.url)["vllm:kv_cache_usage_perc"] == 0.0
    threads = [
        threading.Thread(target=_complete, args=(srv.url, _text(200 + i, 1000), 60))
        for i in range(3)
    ]
    for t in threads:
        t.start()
    peak = 0.0
    deadline = time.monotonic() + 10
    while any(t.is_alive() for t in threads) and time.monotonic() < deadline:
        m = _metrics(srv.url)
        peak = max(peak, m["vllm:kv_cache_usage_perc"])
        time.sleep(0.02)
    for t in threads:
        t.join()
    # Three ~1,060-token sequences in 512 blocks of 16 tokens: about 0.4 of the cache.
    assert 0.3 < peak < 0.5
    assert _metrics(srv.url)["vllm:kv_cache_usage_perc"] == 0.0


def test_eviction_is_lru(start_replica: StartReplica) -> None:
    """A cache of 256 blocks holds three 1,200-token prompts; a fourth evicts the oldest."""
    _, srv = start_replica(config=replace(CONFIG, num_blocks=256))
    prompts = [_text(300 + i, 1200) for i in range(4)]
    for p in prompts[:3]:
        _complete(srv.url, p)
    _complete(srv.url, prompts[1])  # touch B: A is now the least recently used
    _complete(srv.url, prompts[3])  # needs room: evicts A's blocks first
    hit = {
        i: _complete(srv.url, prompts[i]).json()["usage"]["prompt_tokens_details"]["cached_tokens"]
        for i in (1, 0)
    }
    assert hit[1] > 1000  # B survived
    assert hit[0] < 200  # A was evicted


def test_speedup_keeps_behaviour_in_proportionally_less_time(
    start_replica: StartReplica,
) -> None:
    results = {}
    for speedup in (1.0, 4.0):
        _, srv = start_replica(speedup=speedup)
        prompts = [_text(400 + i, 1500) for i in range(3)]
        cold = sum(_ttft(srv.url, p) for p in prompts)  # ~0.6 s each at speedup 1
        warm = [
            _complete(srv.url, p).json()["usage"]["prompt_tokens_details"]["cached_tokens"]
            for p in prompts
        ]
        results[speedup] = (cold, warm)
    assert results[1.0][1] == results[4.0][1]  # same cache behaviour
    ratio = results[1.0][0] / results[4.0][0]
    assert 2.0 < ratio < 8.0, ratio  # ~4× faster; wide bounds for a shared, noisy machine


def test_bad_input_gets_vllm_errors(start_replica: StartReplica) -> None:
    _, srv = start_replica()
    too_long = _complete(srv.url, _text(500, 5000))
    assert too_long.status_code == 400
    err = too_long.json()["error"]
    assert "maximum context length is 4096 tokens" in err["message"]
    assert err["type"] == "BadRequestError" and err["code"] == 400
    r = httpx.post(srv.url + "/v1/completions", json={"model": "other", "prompt": "x"})
    assert r.status_code == 404 and "does not exist" in r.json()["error"]["message"]
    r = httpx.post(srv.url + "/v1/chat/completions", content=b"{oops")
    assert r.status_code == 400
    r = _complete(srv.url, "x", max_tokens=5000)
    assert r.status_code == 400 and r.json()["error"]["param"] == "max_tokens"


def test_disconnect_aborts_and_frees_blocks(start_replica: StartReplica) -> None:
    replica, srv = start_replica(timing=replace(TIMING, decode_seq_s=0.02))
    body = {"model": MODEL, "prompt": _text(600, 800), "max_tokens": 500, "stream": True}
    with (
        httpx.Client(timeout=10) as c,
        c.stream("POST", srv.url + "/v1/completions", json=body) as r,
    ):
        for line in r.iter_lines():
            if line.startswith("data: {"):
                break
    deadline = time.monotonic() + 5
    while replica.in_flight and time.monotonic() < deadline:
        time.sleep(0.02)
    assert replica.in_flight == 0
    assert _metrics(srv.url)["vllm:kv_cache_usage_perc"] == 0.0
    assert _metrics(srv.url)["vllm:e2e_request_latency_seconds_count"] == 0


def test_tokenize_load_health_models(start_replica: StartReplica) -> None:
    _, srv = start_replica()
    assert httpx.get(srv.url + "/health").status_code == 200
    tok = httpx.post(srv.url + "/tokenize", json={"model": MODEL, "prompt": "hello world"}).json()
    assert tok["count"] == len(tok["tokens"]) and tok["max_model_len"] == 4096
    assert httpx.get(srv.url + "/load").json() == {"server_load": 0}
    [card] = httpx.get(srv.url + "/v1/models").json()["data"]
    assert card["id"] == MODEL and card["max_model_len"] == 4096


def test_demo_profile_exists() -> None:
    assert get_profile("demo").config.block_size == 16


def test_openai_client_through_gateway_sees_cache_hits(
    start_replica: StartReplica, serve_app: ServeApp
) -> None:
    import openai

    from gateway.app import build_app
    from routing.config.schema import parse_config

    servers = [start_replica()[1] for _ in range(2)]
    app = build_app(parse_config({
        "backends": [{"url": s.url} for s in servers],
        "routing": {"policy": "session"},
        "server": {"access_log": False},
    }))  # fmt: skip
    gw = serve_app(app, lifespan="on")
    oa = openai.OpenAI(base_url=gw.url + "/v1", api_key="unused", max_retries=0)
    try:
        messages = [{"role": "system", "content": _text(700, 600)},
                    {"role": "user", "content": "hi"}]  # fmt: skip
        cached = []
        for _ in range(2):
            r = oa.chat.completions.create(model=MODEL, messages=messages, max_tokens=4,
                                           user="session-1")  # fmt: skip
            assert r.usage is not None and r.usage.prompt_tokens_details is not None
            cached.append(r.usage.prompt_tokens_details.cached_tokens)
        assert cached[0] == 0 and cached[1] > 500  # same session, same replica, cache hit
    finally:
        oa.close()
