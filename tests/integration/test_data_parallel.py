"""Data-parallel ranks end to end: `kvgate emulate --data-parallel-size 4` engines behind the
gateway, which finds their ranks from the metrics' `engine` labels, names the chosen rank in
`X-data-parallel-rank`, follows each rank's KV events and predicts the cached tokens exactly."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from sim.live.processes import start_emulator
from tests.integration.conftest import StartGateway
from tests.support.kv_emulator import Sockets, events_settled, replicas_with_events, tenant_chat

MODEL = "emu"
RANKS = 4


@pytest.fixture
def engines(tmp_path: Path) -> Iterator[tuple[list[str], Sockets]]:
    extra = ("--num-gpu-blocks", "48", "--data-parallel-size", str(RANKS))
    with replicas_with_events(tmp_path, *extra) as replicas:
        yield replicas


def _chat(tenant: int, turn: int, rng: random.Random) -> dict[str, Any]:
    return tenant_chat(tenant, turn, rng, 200)


def test_ranks_are_targets_with_their_own_metrics_events_and_exact_predictions(
    engines: tuple[list[str], list[tuple[str, str]]], start_gateway: StartGateway
) -> None:
    urls, sockets = engines
    backends = [
        {"url": u, "kv_events": {"endpoint": pub, "replay": rep}}
        for u, (pub, rep) in zip(urls, sockets, strict=True)
    ]
    app, server = start_gateway(
        backends, policy="precise-prefix", tokenizers=[{"model": "*", "source": "engine"}]
    )
    ids = [f"{u.split('://')[1]}@{r}" for u in urls for r in range(RANKS)]
    assert [b.id for b in app.runtime.pool] == ids  # found from the engine labels
    rng = random.Random(3)
    with httpx.Client(base_url=server.url, timeout=10.0) as c:
        for i in range(80):  # 12 tenants on 8 ranks of 48 blocks: each rank evicts
            r = c.post("/v1/chat/completions", json=_chat(rng.randrange(12), i, rng))
            assert r.status_code == 200, r.text
            events_settled(app)
        state = {b["id"]: b for b in c.get("/admin/backends").json()["backends"]}
        page = c.get("/metrics").text
    assert set(state) == set(ids)
    assert {b["dp_rank"] for b in state.values()} == set(range(RANKS))
    assert all(
        b["metrics"] is not None and b["metrics"]["num_blocks"] == 48 for b in state.values()
    )
    # Every request named its rank: the engines balanced none.
    counts = [httpx.get(u + "/kvgate/dp").json() for u in urls]
    assert sum(sum(c["named"]) for c in counts) == 80
    assert all(sum(c["balanced"]) == 0 for c in counts)
    assert sum(1 for c in counts for n in c["named"] if n) >= 6  # spread over the ranks
    graded = [b["precise_index"]["predictions"] for b in state.values()]
    requests = sum(g["requests"] for g in graded)
    assert requests >= 80 - 2 * RANKS  # from each rank's first events on (its block size)
    assert sum(g["exact"] for g in graded) >= 0.99 * requests, graded
    # Each rank's index holds its own cache, block for block.
    for url in urls:
        caches = httpx.get(url + "/kvgate/cache").json()["ranks"]
        for r, cache in enumerate(caches):
            assert state[f"{url.split('://')[1]}@{r}"]["precise_index"]["blocks"] == len(
                cache["block_hashes"]
            )
    assert 'backend="' + ids[5] + '"' in page


def test_a_configured_dp_size_routes_to_ranks_without_events(
    engines: tuple[list[str], list[tuple[str, str]]], start_gateway: StartGateway
) -> None:
    urls, _ = engines
    _, server = start_gateway([{"url": u, "dp_size": RANKS} for u in urls], policy="prefix-aware")
    rng = random.Random(5)
    with httpx.Client(base_url=server.url, timeout=10.0) as c:
        for i in range(24):
            assert c.post("/v1/chat/completions", json=_chat(i % 3, i, rng)).status_code == 200
    counts = [httpx.get(u + "/kvgate/dp").json() for u in urls]
    assert sum(sum(c["named"]) for c in counts) == 24
    # A tenant's turns stay on one rank: 3 tenants, at most a few ranks used.
    assert sum(1 for c in counts for n in c["named"] if n) <= 4


def test_sglang_ranks_are_found_from_server_info_and_named_in_the_body(
    tmp_path: Path, start_gateway: StartGateway
) -> None:
    extra = ["--engine", "sglang", "--data-parallel-size", "2"]
    child, [url] = start_emulator(1, "demo", MODEL, tmp_path / "emu.log", speedup=50, extra=extra)
    with child:
        app, server = start_gateway([{"url": url, "engine": "sglang"}], policy="round-robin")
        host = url.split("://")[1]
        assert [b.id for b in app.runtime.pool] == [f"{host}@0", f"{host}@1"]
        rng = random.Random(1)
        with httpx.Client(base_url=server.url, timeout=10.0) as c:
            for i in range(4):
                assert c.post("/v1/chat/completions", json=_chat(i, i, rng)).status_code == 200
            r = c.post(
                "/generate", json={"text": "hello", "sampling_params": {"max_new_tokens": 2}}
            )
            assert r.status_code == 200, r.text
            metrics = {b["id"]: b["metrics"] for b in c.get("/admin/backends").json()["backends"]}
        counts = httpx.get(url + "/kvgate/dp").json()
        assert counts["named"] == [3, 2] and counts["balanced"] == [0, 0]
        assert all(m is not None and m["num_blocks"] for m in metrics.values())
