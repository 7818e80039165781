"""The precise index end to end: `kvgate emulate` publishes each replica's KV-cache events,
the gateway follows them, tokenizes prompts through the engines' `/tokenize`, and predicts
every request's cached prompt tokens exactly, evictions included."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.integration.conftest import StartGateway
from tests.support.kv_emulator import Sockets, events_settled, replicas_with_events, tenant_chat

MODEL = "emu"


@pytest.fixture
def emulator(tmp_path: Path) -> Iterator[tuple[list[str], Sockets]]:
    with replicas_with_events(tmp_path, "--num-gpu-blocks", "64") as replicas:
        yield replicas


def _chat(tenant: int, turn: int, rng: random.Random) -> dict[str, Any]:
    return tenant_chat(tenant, turn, rng, 300)  # ~300 words a tenant, shared


def test_predictions_match_the_engines_cached_tokens(
    emulator: tuple[list[str], list[tuple[str, str]]], start_gateway: StartGateway
) -> None:
    urls, sockets = emulator
    backends = [
        {"url": u, "kv_events": {"endpoint": pub, "replay": rep}}
        for u, (pub, rep) in zip(urls, sockets, strict=True)
    ]
    app, server = start_gateway(
        backends, policy="precise-prefix", tokenizers=[{"model": "*", "source": "engine"}]
    )
    rng = random.Random(7)
    with httpx.Client(base_url=server.url, timeout=10.0) as c:
        for i in range(60):  # 8 tenants of ~400 tokens on 2 × 64 blocks of 16: evictions
            body = _chat(rng.randrange(8), i, rng)
            r = c.post("/v1/chat/completions", json=body)
            assert r.status_code == 200, r.text
            events_settled(app)
        state = c.get("/admin/backends").json()["backends"]
        route = c.post("/admin/route", json=_chat(0, 99, rng)).json()
    graded = [b["precise_index"]["predictions"] for b in state]
    requests = sum(g["requests"] for g in graded)
    exact = sum(g["exact"] for g in graded)
    # Graded from the first answer on: before any event the block size is not known.
    assert requests >= 58
    assert exact >= 0.99 * requests, graded
    removed = sum(b["precise_index"]["events"]["removed_blocks"] for b in state)
    assert removed > 0  # the engines evicted, and the index followed
    assert route["request"]["prompt_tokens"] > 0
    assert {e["cache_source"] for e in route["endpoints"]} == {"precise"}
    # The index holds what each replica caches, block for block.
    for b, url in zip(state, urls, strict=True):
        cached = httpx.get(url + "/kvgate/cache").json()["block_hashes"]
        assert b["precise_index"]["blocks"] == len(cached)
