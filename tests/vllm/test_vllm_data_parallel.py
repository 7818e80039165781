"""Data-parallel ranks on real vLLM: kvgate finds the ranks of `--data-parallel-size 2`, names
the chosen one in `X-data-parallel-rank`, and vLLM serves each request on that rank.

One vLLM CPU server of 2 ranks (the tiny dummy-weight model, 64 KV blocks of 32 tokens per
rank) behind `kvgate serve` (`prefix-aware`, `x-kvgate-backend` naming the target). Requests
are token-id completions of 4 tenants with 320-token shared prefixes, one at a time: each one's
rank, as kvgate named it, must be the rank whose `vllm:request_success_total{engine=…}` grew,
and each tenant's later requests must find its prefix cached (they stay on its rank).
Writes out/vllm-dp/vllm-dp.json. Needs `.venv-vllm/` (made on first use); `make test-vllm`.
"""

from __future__ import annotations

import json
import random
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from bench import REPO_ROOT
from bench.calibrate.server import ServerSettings, vllm_server
from bench.live_vllm import prepare_vllm
from sim.live.processes import start_gateway

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(1800)]

OUT = REPO_ROOT / "out" / "vllm-dp"
MODEL = "kvgate-vllm-dp"
RANKS = 2
BLOCK = 32
TENANTS = 4
TURNS = 5
PREFIX_TOKENS = 320
SUCCESS = re.compile(r"^vllm:request_success_total\{([^}]*)\}\s+([0-9.e+]+)", re.M)


@dataclass(frozen=True, slots=True)
class Served:
    url: str
    vocab: int


@pytest.fixture(scope="module")
def vllm_dp() -> Iterator[Served]:
    python, model_dir, spec = prepare_vllm(OUT)
    settings = ServerSettings(
        block_size=BLOCK,
        max_model_len=1024,
        num_blocks=64,
        served_model_name=MODEL,
        data_parallel_size=RANKS,
    )
    with vllm_server(python, model_dir, settings, OUT / "vllm.log", ready_timeout_s=600) as url:
        yield Served(url, spec.vocab_size)


def _successes(url: str) -> dict[str, float]:
    """Finished requests per rank (`engine` label), summed over finish reasons."""
    out: dict[str, float] = {}
    for labels, value in SUCCESS.findall(httpx.get(url + "/metrics", timeout=10).text):
        m = re.search(r'engine="(\d+)"', labels)
        if m:
            out[m.group(1)] = out.get(m.group(1), 0.0) + float(value)
    return out


def _gateway_config() -> str:
    path = OUT / "gateway.yaml"
    path.write_text("security:\n  backend_header: id\n", encoding="utf-8")
    return str(path)


def _wait_for_ranks(gateway: str, deadline_s: float = 60.0) -> list[dict[str, Any]]:
    end = time.monotonic() + deadline_s
    while True:
        backends = httpx.get(gateway + "/admin/backends", timeout=10).json()
        rows = backends.get("backends", backends) if isinstance(backends, dict) else backends
        ranked = [b for b in rows if b.get("dp_size") == RANKS]
        if len(ranked) == RANKS or time.monotonic() > end:
            return ranked
        time.sleep(0.5)


def test_kvgate_routes_to_vllm_ranks_and_vllm_serves_them_there(vllm_dp: Served) -> None:
    assert set(_successes(vllm_dp.url)) == {"0", "1"}, "vLLM publishes one series per rank"
    rng = random.Random(7)
    prefixes = [
        [rng.randrange(3, vllm_dp.vocab) for _ in range(PREFIX_TOKENS)] for _ in range(TENANTS)
    ]
    process, gateway = start_gateway(
        [f"{vllm_dp.url},engine=vllm"], "prefix-aware", OUT / "gateway.log",
        extra=("--config", _gateway_config()),
    )  # fmt: skip
    rows: list[dict[str, Any]] = []
    with process:
        ranks = _wait_for_ranks(gateway)
        assert sorted(b["dp_rank"] for b in ranks) == [0, 1], ranks
        with httpx.Client(timeout=120.0) as client:
            for turn in range(TURNS):
                for tenant, prefix in enumerate(prefixes):
                    rows.append(_one(client, gateway, vllm_dp, tenant, turn, prefix, rng))
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "vllm-dp.json").write_text(json.dumps(rows, indent=2) + "\n", encoding="utf-8")
    assert all(r["named_rank"] == r["served_rank"] for r in rows), rows
    later = [r for r in rows if r["turn"] > 0]
    cached = [r for r in later if r["cached_tokens"] >= PREFIX_TOKENS // BLOCK * BLOCK]
    assert len(cached) == len(later), later  # each tenant stays on the rank holding its prefix
    by_tenant = {t: {r["named_rank"] for r in rows if r["tenant"] == t} for t in range(TENANTS)}
    assert all(len(ranks) == 1 for ranks in by_tenant.values()), by_tenant


def _one(
    client: httpx.Client,
    gateway: str,
    served: Served,
    tenant: int,
    turn: int,
    prefix: list[int],
    rng: random.Random,
) -> dict[str, Any]:
    before = _successes(served.url)
    prompt = prefix + [rng.randrange(3, served.vocab) for _ in range(rng.randrange(8, 64))]
    body = {"model": MODEL, "prompt": prompt, "max_tokens": 1, "temperature": 0}
    response = client.post(gateway + "/v1/completions", json=body)
    assert response.status_code == 200, response.text
    target = response.headers["x-kvgate-backend"]
    after = _successes(served.url)
    grew = [rank for rank in after if after[rank] > before.get(rank, 0.0)]
    details = response.json()["usage"].get("prompt_tokens_details") or {}
    return {
        "tenant": tenant,
        "turn": turn,
        "target": target,
        "named_rank": int(target.rsplit("@", 1)[1]),
        "served_rank": int(grew[0]) if len(grew) == 1 else -1,
        "cached_tokens": details.get("cached_tokens") or 0,
    }
