"""Prefix-aware routing beats round-robin on the replicas' own prefix-cache hit rate."""

from __future__ import annotations

import random
from dataclasses import replace

import httpx

from gateway.app import build_app
from routing.config.schema import parse_config
from sim.emulator.app import EmulatorApp
from sim.emulator.replica import Replica
from sim.engine.profiles import get_profile
from sim.engine.tokenizer import BuiltinTokenizer
from sim.live.scrape import parse_vllm_metrics
from sim.workloads import synth_text
from tests.support.fixture_types import ServeApp

MODEL = "emu"


def _hit_rate(policy: str, serve_app: ServeApp) -> tuple[float, list[int]]:
    base = get_profile("demo")
    # 160 blocks of 16 tokens: a replica holds about four of the eight tenants' prompts.
    profile = replace(base, config=replace(base.config, num_blocks=160))
    urls = []
    for _ in range(4):
        app = EmulatorApp(Replica(profile, MODEL, speedup=20.0), BuiltinTokenizer())
        urls.append(serve_app(app, lifespan="on").url)
    gw_app = build_app(
        parse_config(
            {
                "backends": [{"url": u} for u in urls],
                "routing": {"policy": policy},
                "server": {"access_log": False},
                # The servers share this process's GIL with the client: on a busy machine a
                # scrape can run late, and stale metrics would score a replica down and make
                # the placement depend on timing rather than on the routing rules under test.
                "health": {"metrics_stale_after_s": 5.0},
            }
        )
    )
    gw = serve_app(gw_app, lifespan="on")
    rng = random.Random(5)
    systems = [synth_text(random.Random(100 + t), 500) for t in range(8)]
    order = [t for t in range(8) for _ in range(6)]
    rng.shuffle(order)
    with httpx.Client(base_url=gw.url, timeout=30) as c:
        for i, tenant in enumerate(order):
            body = {
                "model": MODEL,
                "max_tokens": 2,
                "messages": [
                    {"role": "system", "content": systems[tenant]},
                    {"role": "user", "content": f"question {i}: " + synth_text(rng, 20)},
                ],
            }
            assert c.post("/v1/chat/completions", json=body).status_code == 200
    reports = [parse_vllm_metrics(u, httpx.get(u + "/metrics").text) for u in urls]
    hits = sum(r.prefix_hits for r in reports)
    queries = sum(r.prefix_queries for r in reports)
    return hits / queries, [r.requests for r in reports]


def test_prefix_aware_beats_round_robin_on_hit_rate(serve_app: ServeApp) -> None:
    rr, rr_share = _hit_rate("round-robin", serve_app)
    prefix, prefix_share = _hit_rate("prefix-aware", serve_app)
    assert rr_share == [12, 12, 12, 12]
    assert prefix > 2 * rr, (prefix, rr)
    # Spread out: every replica serves, none takes more than 1.5× its even share
    # (tenants are the unit of placement, 8 tenants on 4 replicas).
    assert min(prefix_share) > 0 and max(prefix_share) <= 18, prefix_share
    print(f"hit rate: round-robin {rr:.1%}, prefix-aware {prefix:.1%}; shares {prefix_share}")
