"""The prefix index learns from the cached tokens the engines report, through a real gateway
in front of an emulated replica with a small KV cache."""

from __future__ import annotations

import random
import re
import string
from dataclasses import replace
from typing import Any

import httpx
import orjson

from gateway.app import build_app
from routing.config.schema import parse_config
from sim.emulator.app import EmulatorApp
from sim.emulator.replica import Replica
from sim.engine.profiles import get_profile
from sim.engine.tokenizer import BuiltinTokenizer
from tests.support.fixture_types import ServeApp

MODEL = "emu"


def _words(seed: int, tokens: int) -> str:
    """`tokens` tokens of 4 bytes each (the gateway's default guess): 3-letter words."""
    rng = random.Random(seed)
    return " ".join("".join(rng.choices(string.ascii_lowercase, k=3)) for _ in range(tokens))


def _counter(text: str, name: str) -> float:
    match = re.search(rf"^{name}\{{[^}}]*\}} (\S+)$", text, re.MULTILINE)
    return float(match.group(1)) if match else 0.0


class Gateway:
    def __init__(self, client: httpx.Client) -> None:
        self.c = client

    def complete(self, prompt: str, max_tokens: int) -> dict[str, Any]:
        body = {"model": MODEL, "prompt": prompt, "max_tokens": max_tokens}
        r = self.c.post("/v1/completions", json=body)
        assert r.status_code == 200, r.text
        return r.json()

    def stream(self, prompt: str) -> list[dict[str, Any]]:
        """A streamed completion whose client did not ask for usage: its events."""
        body = {"model": MODEL, "prompt": prompt, "max_tokens": 2, "stream": True}
        events = []
        with self.c.stream("POST", "/v1/completions", json=body) as r:
            for line in r.iter_lines():
                if line.startswith("data: {"):
                    events.append(orjson.loads(line[6:]))
        return events

    def matched(self, prompt: str) -> int:
        """Leading blocks of `prompt` the gateway's index says the replica holds."""
        body = {"model": MODEL, "prompt": prompt}
        r = self.c.post("/admin/route", json=body)
        [endpoint] = r.json()["endpoints"]
        return int(endpoint["matched_blocks"])

    def cache_counters(self) -> tuple[float, float, float]:
        text = self.c.get("/metrics").text
        return (
            _counter(text, "kvgate_predicted_cache_hit_tokens_total"),
            _counter(text, "kvgate_observed_cache_hit_tokens_total"),
            _counter(text, "kvgate_prefix_index_corrections_total"),
        )


def test_index_corrects_itself_after_the_engine_evicts(serve_app: ServeApp) -> None:
    base = get_profile("demo")
    # 64 blocks of 16 tokens. The engine caches generated tokens too; the index counts
    # prompts only, so long answers make the engine evict what the index still holds.
    profile = replace(base, config=replace(base.config, num_blocks=64))
    engine = serve_app(EmulatorApp(Replica(profile, MODEL, speedup=50.0), BuiltinTokenizer()))
    app = build_app(
        parse_config(
            {
                "backends": [{"url": engine.url}],
                "routing": {"policy": "prefix-aware"},
                "server": {"access_log": False},
                "health": {"metrics_stale_after_s": 5.0},
            }
        )
    )
    gw_server = serve_app(app, lifespan="on")
    a = _words(1, 400)  # 1,599 bytes: 24 full blocks of 64
    others = [_words(10 + i, 150) for i in range(3)]  # 9 blocks each, 150-token answers
    with httpx.Client(base_url=gw_server.url, timeout=30) as c:
        gw = Gateway(c)
        first = gw.stream(a)
        assert first and all("usage" not in e for e in first)
        assert gw.cache_counters() == (0.0, 0.0, 0.0)
        for prompt in others:
            gw.complete(prompt, max_tokens=150)
        assert gw.matched(a) == 24  # the index still counts A as held
        assert gw.cache_counters()[2] == 0

        again = gw.stream(a)  # A again: the engine kept only its head
        assert [e["choices"] for e in again] == [e["choices"] for e in first]
        assert all("usage" not in e for e in again)  # the usage the gateway asked for
        predicted, observed, corrections = gw.cache_counters()
        assert predicted >= 380 and observed < predicted / 2, (predicted, observed)
        assert corrections == 1
        state = c.get("/admin/backends").json()["backends"][0]["cache_hits"]
        assert state["index_corrections"] == 1 and state["index_entries_dropped"] > 0
        assert state["predicted_tokens"] == predicted and state["observed_tokens"] == observed

        # The engine holds A again (it just recomputed it), and the index says so; what the
        # recompute pushed out of the engine, the oldest prompt, the index dropped too.
        assert gw.matched(a) == 24
        assert gw.matched(others[0]) == 0
        done = gw.complete(others[0], max_tokens=1)
        assert done["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
        assert gw.cache_counters()[2] == 1  # the index agreed with the engine: no correction
        done = gw.complete(a, max_tokens=1)
        assert done["usage"]["prompt_tokens_details"]["cached_tokens"] >= 384
        assert gw.cache_counters()[2] == 1
