"""Record → replay: the gateway records live chats in front of emulated replicas; the
simulator replays the recording with the same policy and finds the same prefix sharing."""

from __future__ import annotations

import random
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import orjson

from gateway.prompt_bytes import prompt_bytes
from routing.traces import detect_format, load_trace
from sim.emulator.app import EmulatorApp
from sim.emulator.replica import Replica
from sim.engine.profiles import get_profile
from sim.engine.tokenizer import BuiltinTokenizer
from sim.live.scrape import parse_vllm_metrics
from sim.replay import Replay, SimSettings
from sim.workloads import synth_text
from tests.integration.conftest import StartGateway
from tests.support.fixture_types import ServeApp

MODEL = "emu"
POLICY = "prefix-aware"
REPLICAS = 2
TURNS = 3
CONVERSATIONS = 4  # over two tenants' system prompts


def _chat(
    c: httpx.Client, session: str, messages: list[dict[str, str]]
) -> tuple[str, dict[str, Any]]:
    """One streamed turn; the answer's text and the engine's usage chunk."""
    body = {
        "model": MODEL,
        "messages": messages,
        "stream": True,
        "max_tokens": 6 + len(messages),
        "stream_options": {"include_usage": True},
    }
    with c.stream(
        "POST", "/v1/chat/completions", json=body, headers={"x-session-id": session}
    ) as r:
        assert r.status_code == 200
        chunks = [orjson.loads(ln[6:]) for ln in r.iter_lines() if ln.startswith("data: {")]
    text = "".join(ch["choices"][0]["delta"].get("content") or "" for ch in chunks if ch["choices"])
    return text, chunks[-1]["usage"]


def _run_chats(url: str) -> tuple[list[dict[str, Any]], list[list[dict[str, str]]]]:
    rng = random.Random(3)
    systems = [f"You answer for tenant {t}. " + synth_text(rng, 300) for t in range(2)]
    usages, prompts = [], []
    with httpx.Client(base_url=url, timeout=30) as c:
        for n in range(CONVERSATIONS):
            messages = [{"role": "system", "content": systems[n % 2]}]
            for _ in range(TURNS):
                messages.append({"role": "user", "content": synth_text(rng, 40)})
                prompts.append(list(messages))
                answer, usage = _chat(c, f"chat-{n}", messages)
                usages.append(usage)
                messages.append({"role": "assistant", "content": answer})
    return usages, prompts


def test_recorded_chats_replay_in_the_simulator(
    serve_app: ServeApp,
    start_gateway: StartGateway,
    client: Callable[..., httpx.Client],
    tmp_path: Path,
) -> None:
    profile = get_profile("demo")
    urls = [
        serve_app(
            EmulatorApp(Replica(profile, MODEL, speedup=20.0), BuiltinTokenizer()), lifespan="on"
        ).url
        for _ in range(REPLICAS)
    ]
    path = tmp_path / "recorded.jsonl"
    _, gw = start_gateway(urls, policy=POLICY, server={"record_path": str(path)})
    usages, prompts = _run_chats(gw.url)
    gw.stop()  # writes the rest of the recording
    reports = [parse_vllm_metrics(u, httpx.get(u + "/metrics").text) for u in urls]
    live_hit_rate = sum(r.prefix_hits for r in reports) / sum(r.prefix_queries for r in reports)

    assert detect_format(path) == "kvgate"
    trace = load_trace(path)
    n = CONVERSATIONS * TURNS
    assert len(trace) == n == sum(r.requests for r in reports)
    assert {r.session for r in trace} == {f"chat-{i}" for i in range(CONVERSATIONS)}
    # Output tokens are the engines' own count (the stream's usage chunk).
    assert sorted(r.output_tokens for r in trace) == sorted(u["completion_tokens"] for u in usages)
    # Input tokens are the gateway's estimate, bytes of the canonical prompt / 4, which the
    # built-in tokenizer (~4 characters a token) puts close to the engine's count.
    rendered = sorted(int(len(prompt_bytes("chat", p)) / 4) for p in prompts)
    assert sorted(r.input_tokens for r in trace) == rendered
    for rec, use in zip(
        sorted(trace, key=lambda r: r.input_tokens),
        sorted(usages, key=lambda u: u["prompt_tokens"]),
        strict=True,
    ):
        assert 0.75 < rec.input_tokens / use["prompt_tokens"] < 1.33, (rec.input_tokens, use)

    result = Replay(trace, POLICY, profile, SimSettings(replicas=REPLICAS)).run()
    assert (result.requests, result.rejected) == (n, 0)
    sim_hit_rate = result.prefix_hits / result.prefix_queries
    # Turns of a chat share its earlier turns' blocks, and chats share their tenant's
    # system prompt: the replay finds those hits, about as many as the engines did.
    print(f"hit rate: live {live_hit_rate:.3f}, replayed {sim_hit_rate:.3f}")
    assert sim_hit_rate > 0.3 and live_hit_rate > 0.3
    assert abs(sim_hit_rate - live_hit_rate) < 0.1, (sim_hit_rate, live_hit_rate)

    out = tmp_path / "sim"
    cmd = [sys.executable, "-m", "kvgate.cli", "sim", "--trace", str(path)]
    cmd += ["--policies", f"{POLICY},round-robin", "--replicas", str(REPLICAS)]
    cmd += ["--profile", "demo", "--out", str(out)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    rows = orjson.loads((out / "summary.json").read_bytes())
    assert [(r["policy"], r["requests"]) for r in rows] == [(POLICY, n), ("round-robin", n)]
    assert rows[0]["hit_rate"] == sim_hit_rate
    assert "prefix-aware" in done.stdout and (out / "ttft_cdf.png").exists()
