"""`python -m bench shared-state-fleet`: N gateways with and without shared state, hit rate.

For each seed, three runs, each in front of a fresh `kvgate emulate --replicas R` (profile
demo): one `kvgate serve`; `--gateways` of them without shared state; the same with
`--redis` (a redis-server this benchmark starts, emptied before the run). One client sends
`--tenants` × `--per-tenant` chats (a tenant's system prompt of `--words` words plus a short
question), sequentially, spread round-robin over the gateways. Reports the emulated
replicas' prefix-cache hit rate, the mean request latency, each replica's share and the
errors. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import redis

from sim.live.processes import start_emulator, start_gateway, start_redis
from sim.live.scrape import parse_vllm_metrics
from sim.workloads import synth_text

MODEL = "emu"


def _drive(
    gateways: list[str], replicas: list[str], args: argparse.Namespace, seed: int
) -> dict[str, Any]:
    rng = random.Random(seed)
    systems = [synth_text(random.Random(100 + t), args.words) for t in range(args.tenants)]
    order = [t for t in range(args.tenants) for _ in range(args.per_tenant)]
    rng.shuffle(order)
    errors, latencies = 0, []
    with httpx.Client(timeout=60) as c:
        for i, tenant in enumerate(order):
            question = f"q{i} " + synth_text(rng, 20)
            body = {
                "model": MODEL,
                "max_tokens": 2,
                "messages": [
                    {"role": "system", "content": systems[tenant]},
                    {"role": "user", "content": question},
                ],
            }
            started = time.monotonic()
            r = c.post(gateways[i % len(gateways)] + "/v1/chat/completions", json=body)
            latencies.append(time.monotonic() - started)
            errors += r.status_code != 200
    reports = [parse_vllm_metrics(u, httpx.get(u + "/metrics").text) for u in replicas]
    hits = sum(r.prefix_hits for r in reports)
    queries = sum(r.prefix_queries for r in reports)
    return {
        "hit_rate": round(hits / queries, 4) if queries else None,
        "mean_latency_s": round(statistics.fmean(latencies), 4),
        "shares": [r.requests for r in reports],
        "errors": errors,
    }


def _run(
    n: int, extra: list[str], args: argparse.Namespace, seed: int, logs: Path
) -> dict[str, Any]:
    with contextlib.ExitStack() as stack:
        emulator, replicas = start_emulator(args.replicas, "demo", MODEL, logs / "emulator.log")
        stack.enter_context(emulator)
        gateways = []
        for i in range(n):
            child, url = start_gateway(replicas, args.policy, logs / f"gateway-{i}.log", extra)
            stack.enter_context(child)
            gateways.append(url)
        return _drive(gateways, replicas, args, seed)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench shared-state-fleet", description=__doc__)
    parser.add_argument("--gateways", type=int, default=4)
    parser.add_argument("--replicas", type=int, default=4)
    parser.add_argument("--tenants", type=int, default=24)
    parser.add_argument("--per-tenant", type=int, default=10)
    parser.add_argument("--words", type=int, default=500, help="words per system prompt")
    parser.add_argument("--policy", default="prefix-aware")
    parser.add_argument("--seeds", default="1,2")
    args = parser.parse_args(argv)
    proc, url = start_redis(Path(tempfile.gettempdir()) / "kvgate-bench-redis.log")
    result: dict[str, Any] = {"params": vars(args), "runs": []}
    try:
        client = redis.Redis.from_url(url)
        with tempfile.TemporaryDirectory(prefix="kvgate-fleet-") as tmp:
            for seed in (int(s) for s in args.seeds.split(",")):
                for name, n, extra in (
                    ("one-gateway", 1, []),
                    ("memory", args.gateways, []),
                    ("redis", args.gateways, ["--redis", url]),
                ):
                    client.flushall()
                    run = _run(n, extra, args, seed, Path(tmp))
                    result["runs"].append({"seed": seed, "setup": name, "gateways": n, **run})
                    print(json.dumps(result["runs"][-1]), file=sys.stderr, flush=True)
        client.close()
    finally:
        proc.stop()
    json.dump(result, sys.stdout, indent=2)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
