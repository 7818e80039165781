"""Part 1: the same multi-tenant chats through three front ends, each on a fresh fleet.

Routers: Envoy with `kvgate epp` as its endpoint picker, Envoy alone (its pool cluster
round-robin), and `kvgate serve`; the picker and the front door run the same policy. The
workload and fleet are the quality bench's synthetic ones (`bench.quality.workloads`), and
`run_experiment` measures each router (hit rate from the replicas' counters, client TTFT).
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from bench.quality.workloads import synthetic
from sim.live.envoy import start_envoy, start_epp
from sim.live.experiment import (
    ExperimentResult,
    Router,
    RouterFactory,
    RouterSite,
    kvgate_router,
    run_experiment,
)

ENVOY_EPP = "envoy + kvgate epp"
ENVOY_RR = "envoy round-robin"
FRONT_DOOR = "kvgate serve"
ROUTERS = (ENVOY_EPP, ENVOY_RR, FRONT_DOOR)
SETTLE_S = 1.0  # a few metric scrapes before the first decision


def envoy_router(policy: str | None, body_mode: str, template: str) -> RouterFactory:
    """Envoy from `deploy/envoy/TEMPLATE`, with `kvgate epp --policy POLICY` (otherwise at
    its defaults) as its picker, or (`policy=None`) without a picker."""

    @contextlib.contextmanager
    def start(site: RouterSite) -> Iterator[Router]:
        log = site.log_dir / f"{site.tag}-envoy.log"
        urls = site.replica_urls
        if policy is None:
            envoy, url, _ = start_envoy(urls, None, log, body_mode=body_mode, template=template)
            with envoy:
                yield Router(url, {}, tuple(envoy.command))
            return
        epp_log = site.log_dir / f"{site.tag}-epp.log"
        epp = start_epp(urls, epp_log, extra=("--policy", policy))
        with epp.proc:
            envoy, url, _ = start_envoy(
                urls, epp.grpc_port, log, body_mode=body_mode, template=template
            )
            with envoy:
                time.sleep(SETTLE_S)
                yield Router(url, {}, tuple(epp.proc.command))

    return start


def router_factory(name: str, policy: str, body_mode: str, template: str) -> RouterFactory:
    if name == ENVOY_EPP:
        return envoy_router(policy, body_mode, template)
    if name == ENVOY_RR:
        return envoy_router(None, body_mode, template)
    return kvgate_router(policy, settle_s=SETTLE_S)


async def run_quality(
    *,
    conversations: int,
    rate: float,
    seed: int,
    replicas: int,
    policy: str,
    body_mode: str,
    log_dir: Path,
    template: str = "envoy.yaml",
) -> list[ExperimentResult]:
    """Each router in turn on a fresh fleet, the same chats every time."""
    results = []
    for i, name in enumerate(ROUTERS, 1):
        workload, fleet = synthetic(conversations, rate, seed, replicas)
        print(f"[quality {i}/{len(ROUTERS)}] {name}", file=sys.stderr, flush=True)
        factory = router_factory(name, policy, body_mode, template)
        results.append(
            await run_experiment(fleet, factory, workload, label=f"epp-{name}", log_dir=log_dir)
        )
    return results
