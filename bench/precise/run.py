"""One experiment of `bench.precise`: a fleet with KV events, kvgate in front of it."""

from __future__ import annotations

import contextlib
import json
import socket
import time
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.redis_outage import RedisOutage
from bench.regime.grid import Cell, FleetSpec
from bench.regime.live import MODEL, workload
from bench.regime.simulate import saturation_rps
from sim.live.client import Fronts
from sim.live.experiment import Fleet, Router, RouterSite, run_experiment
from sim.live.processes import HOST, start_gateway, start_redis, wait_for_workers

TOKENIZER_CONFIG = """\
# The engines' own /tokenize: prompts keyed exactly as the emulator caches them.
tokenizers:
  - model: "*"
    source: engine
"""


def free_port_block(count: int) -> int:
    """The first of `count` consecutive ports that were free a moment ago."""
    for _ in range(200):
        with socket.socket() as probe:
            probe.bind((HOST, 0))
            first = int(probe.getsockname()[1])
        if first + count >= 65536:
            continue
        socks: list[socket.socket] = []
        try:
            for port in range(first, first + count):
                s = socket.socket()
                socks.append(s)
                s.bind((HOST, port))
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
        return first
    raise RuntimeError(f"no {count} consecutive free ports")


@dataclass(slots=True)
class EventFleet:
    """A fleet whose replica i publishes on `base + i` and replays on `base + replicas + i`."""

    spec: FleetSpec
    slowdown: float
    events: bool = True  # False: no events published, none followed
    base: int = field(default=0)

    def fleet(self) -> Fleet:
        self.base = free_port_block(2 * self.spec.replicas)
        extra = ("--kv-events-port", str(self.base)) if self.events else ()
        return Fleet(
            self.spec.replicas,
            self.spec.profile,
            MODEL,
            speedup=1 / self.slowdown,
            extra_args=extra,
        )

    def backends(self, urls: Sequence[str]) -> list[str]:
        if not self.events:
            return list(urls)
        n = len(urls)
        return [
            f"{url},kv_events=tcp://{HOST}:{self.base + i},"
            f"kv_replay=tcp://{HOST}:{self.base + n + i}"
            for i, url in enumerate(urls)
        ]


def _get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as resp:
        return json.load(resp)


def gateway_router(  # type: ignore[no-untyped-def]
    events: EventFleet,
    policy: str,
    state: dict[str, Any],
    *,
    config_extra: str = "",
    gateways: int = 1,
    redis: bool = False,
    spread: str = "client",
    workers: int = 1,
    outage: RedisOutage | None = None,
    front: int | None = None,
):
    """kvgate with `policy`, following the fleet's events (if it publishes them); with
    `gateways` > 1, that many gateways sharing nothing but the engines' events — or, with
    `redis`, their routing state through a fresh `redis-server` — which the clients spread
    over themselves (`spread`: `client`, client i to gateway i mod n; `request`, every
    request to the next gateway); `workers`: `kvgate serve --workers N` each; `outage`: the
    redis-server killed and started again during the run (`bench.redis_outage`); `front`: the
    clients all send to that gateway alone (the others run, share and scrape, but route
    nothing). On exit
    (before they stop) their /admin/backends and the replicas' caches go into `state`."""

    @contextlib.contextmanager
    def start(site: RouterSite) -> Iterator[Router]:
        with contextlib.ExitStack() as stack:
            text = (TOKENIZER_CONFIG if events.events else "") + config_extra
            if redis:
                redis_proc, redis_url = start_redis(site.log_dir / f"{site.tag}-redis.log")
                stack.enter_context(redis_proc)
                text += f"\nstate:\n  backend: redis\n  url: {redis_url}\n"
            config = site.log_dir / f"{site.tag}-kvgate.yaml"
            config.write_text(text)
            extra = ["--config", str(config)]
            if workers > 1:
                extra += ["--workers", str(workers)]
            backends = events.backends(site.replica_urls)
            urls = []
            for g in range(gateways):
                log = site.log_dir / f"{site.tag}-gateway{g}.log"
                process, url = start_gateway(backends, policy, log, extra)
                stack.enter_context(process)
                if workers > 1:
                    wait_for_workers(url, workers)
                urls.append(url)
            fronts = Fronts(
                tuple(urls) if front is None else (urls[front],),
                "request" if spread == "request" else "client",
            )
            time.sleep(1.0)  # a few scrapes, and the subscribers connected
            if outage is not None and redis:
                logs = site.log_dir / site.tag
                logs.mkdir(parents=True, exist_ok=True)
                stack.enter_context(outage.during(redis_proc, redis_url, site.replica_urls, logs))
            try:
                yield Router(urls[0], {}, tuple(process.command), fronts=fronts)
            finally:
                time.sleep(0.5)  # the last events in
                answers = [_get_json(url + "/admin/backends") for url in urls]
                state["backends"] = [b for a in answers for b in a["backends"]]
                state["shared"] = [a.get("state") or {} for a in answers]
                if events.events:
                    state["caches"] = [
                        len(_get_json(u + "/kvgate/cache")["block_hashes"])
                        for u in site.replica_urls
                    ]

    return start


def grade(state: dict[str, Any]) -> dict[str, Any]:
    """The gateway's graded predictions and index sizes, summed over the backends."""
    total = {"requests": 0, "exact": 0, "over": 0, "under": 0, "events_only_exact": 0}
    index_blocks = []
    for b in state.get("backends", []):
        p = b.get("precise_index") or {}
        for k in total:
            total[k] += (p.get("predictions") or {}).get(k, 0)
        index_blocks.append(p.get("blocks"))
    n = total["requests"]
    return {
        **total,
        "exact_share": total["exact"] / n if n else None,
        "events_only_exact_share": total["events_only_exact"] / n if n else None,
        "index_blocks": index_blocks,
        "engine_cached_blocks": state.get("caches", []),
    }


def sharing_lags(state: dict[str, Any]) -> dict[str, Any] | None:
    """What each gateway measured of the others' state reaching it (`/admin/backends`
    `state`): the events' and the load reports' lags (ms: n, p50, p90, p99, max), gateway by
    gateway; None when nothing was shared."""
    shared = [s for s in state.get("shared", []) if s.get("channel")]
    if not shared:
        return None
    return {
        "events_lag_ms": [(s.get("events") or {}).get("lag_ms") for s in shared],
        "load_lag_ms": [(s.get("load") or {}).get("lag_ms") for s in shared],
    }


async def run(
    cell: Cell,
    spec: FleetSpec,
    policy: str,
    *,
    seed: int,
    slowdown: float,
    log_dir: Path,
    config_extra: str = "",
    gateways: int = 1,
    events: bool = True,
    redis: bool = False,
    spread: str = "client",
    workers: int = 1,
    outage: RedisOutage | None = None,
    front: int | None = None,
    jitter: tuple[float, int] | None = None,
) -> dict[str, Any]:
    """`cell`'s chats (seed `seed`) through kvgate `policy` on a fresh fleet with events;
    `jitter`: an open loop's arrivals jittered (max seconds, seed: `bench.regime.live`)."""
    fleet = EventFleet(spec, slowdown, events)
    state: dict[str, Any] = {}
    # An open loop's rate is a share of round-robin's saturation rate (simulated, as the
    # regime map does); a closed loop's clients set their own pace.
    saturation = 1.0 if cell.loop == "closed" else saturation_rps(cell, spec, seed)
    traffic = workload(cell, spec, seed, saturation, slowdown, jitter=jitter)
    result = await run_experiment(
        fleet.fleet(),
        gateway_router(
            fleet,
            policy,
            state,
            config_extra=config_extra,
            gateways=gateways,
            redis=redis,
            spread=spread,
            workers=workers,
            outage=outage,
            front=front,
        ),
        traffic,
        label=f"{cell.name}-s{seed}{'' if jitter is None else f'j{jitter[1]}'}"
        f"/kvgate-{policy}-g{gateways}w{workers}" + ("-redis" if redis else ""),
        log_dir=log_dir,
        progress_every_s=15.0,
    )
    return {
        "cell": cell.name,
        "seed": seed,
        "jitter": None if jitter is None else {"max_s": jitter[0], "seed": jitter[1]},
        "policy": policy,
        "gateways": gateways,
        "workers": workers,
        "spread": spread,
        "events": events,
        "redis": redis,
        **result.figures(),
        "precise": grade(state),
        "sharing": sharing_lags(state),
        **({"outage": outage.result} if outage is not None else {}),
    }
