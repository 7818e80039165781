"""The live run behind the dashboard picture: emulated vLLM replicas, `kvgate serve`, chats.

Multi-tenant chats (closed loop, streamed, the quality bench's kind) start as a Poisson
process; a surge of extra chats in the middle of the run pushes the replicas past the
admission limit, so the queue, the shed requests and the engines' queues have something to
show. Every `scrape_s` the gateway's and each replica's `/metrics` are read and stored as
Prometheus would store them, with `job` and `instance` (host:port) labels added.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import httpx
from prometheus_client.parser import text_string_to_metric_families

from bench.dashboard.promql import Store
from sim.live.client import RunStats, report_progress, run_closed_loop
from sim.live.experiment import Fleet, RouterSite, kvgate_router
from sim.workloads import closed_loop_chats
from sim.workloads.closed_loop import Conversation

MODEL = "kvgate-dashboard"
# Admission limits small enough for the surge to queue and shed on the demo engines.
GATEWAY_CONFIG = """\
server: {access_log: false}
admission: {max_in_flight_per_backend: 6, max_queue: 12, queue_timeout_s: 3.0}
"""


@dataclass(frozen=True, slots=True)
class LiveSettings:
    """What the run sends, and to how many replicas."""

    replicas: int
    conversations: int
    rate: float  # chats started per second
    surge: int  # extra chats started at once, mid-run
    seed: int
    scrape_s: float
    policy: str


@dataclass(frozen=True, slots=True)
class LiveRun:
    """The scraped series and what the client saw."""

    store: Store
    started: float  # on the scrapes' clock (seconds since the run began: 0)
    ended: float
    requests: int
    errors: int
    targets: dict[str, str]  # instance → job


def _conversations(s: LiveSettings) -> list[Conversation]:
    base = closed_loop_chats(
        seed=s.seed, tenants=12, conversations=s.conversations, turns=4, rate_per_s=s.rate
    )
    middle = base[len(base) // 2].start_s
    burst = closed_loop_chats(
        seed=s.seed + 1, tenants=12, conversations=s.surge, turns=2, rate_per_s=200.0
    )
    surge = [dataclasses.replace(c, id=f"surge-{c.id}", start_s=middle + c.start_s) for c in burst]
    return sorted(base + surge, key=lambda c: c.start_s)


async def _scrape(
    client: httpx.AsyncClient, targets: dict[str, str], store: Store, t: float
) -> None:
    async def one(url: str, job: str) -> None:
        with contextlib.suppress(httpx.HTTPError):
            text = (await client.get(url + "/metrics")).text
            instance = urlsplit(url).netloc
            for family in text_string_to_metric_families(text):
                for sample in family.samples:
                    labels = {**sample.labels, "job": job, "instance": instance}
                    store.add(t, sample.name, labels, sample.value)

    await asyncio.gather(*(one(url, job) for url, job in targets.items()))


async def _scrape_until(
    targets: dict[str, str], store: Store, every_s: float, t0: float, done: asyncio.Event
) -> None:
    async with httpx.AsyncClient(timeout=2.0) as client:
        while not done.is_set():
            tick = time.monotonic()
            await _scrape(client, targets, store, tick - t0)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(done.wait(), max(0.0, every_s - (time.monotonic() - tick)))
        await _scrape(client, targets, store, time.monotonic() - t0)


async def run_live(settings: LiveSettings, log_dir: Path) -> LiveRun:
    """Start the fleet and the gateway, send the chats while scraping, stop everything."""
    config = log_dir / "kvgate.yaml"
    config.write_text(GATEWAY_CONFIG)
    fleet = Fleet(settings.replicas, "demo", MODEL)
    conversations = _conversations(settings)
    total = sum(len(c.user_turns) for c in conversations)
    with fleet.launch(log_dir, "dashboard") as urls:
        site = RouterSite(tuple(urls), MODEL, log_dir, "dashboard")
        factory = kvgate_router(settings.policy, ("--config", str(config)), settle_s=1.0)
        with factory(site) as router:
            targets = {router.url: "kvgate", **dict.fromkeys(urls, "vllm")}
            return await _drive(settings, router.url, targets, conversations, total)


async def _drive(
    settings: LiveSettings,
    url: str,
    targets: dict[str, str],
    conversations: Sequence[Conversation],
    total: int,
) -> LiveRun:
    store, stats, done = Store(), RunStats(), asyncio.Event()
    t0 = time.monotonic()
    scraper = asyncio.create_task(_scrape_until(targets, store, settings.scrape_s, t0, done))
    await asyncio.sleep(2 * settings.scrape_s)  # a few idle points first, as a panel shows
    progress = asyncio.create_task(report_progress("dashboard", stats, total, done, 10.0))
    started = time.monotonic() - t0
    try:
        await run_closed_loop(
            url, MODEL, list(conversations), stats, lambda c: {"x-session-id": c.id}
        )
        await asyncio.sleep(3 * settings.scrape_s)  # the tail of the gauges
    finally:
        done.set()
        await asyncio.gather(scraper, progress)
    ended = time.monotonic() - t0
    print(f"  {len(stats.results)} requests, {stats.errors} errors", file=sys.stderr)
    instances = {urlsplit(u).netloc: job for u, job in targets.items()}
    return LiveRun(store, started, ended, len(stats.results), stats.errors, instances)
