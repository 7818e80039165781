"""Live runs of the P/D benchmark: an emulated fleet, a router in front of it, one workload.

A fleet (`FleetSpec`) is `kvgate emulate` with `prefill` P and `decode` D replicas speaking
vLLM's or SGLang's protocol, or `prefill + decode` replicas of role both (`aggregated`), all
of one engine profile and KV link, started fresh (cold caches) for every run. A router
(`RouterSpec`) is kvgate (a P/D pool of role-tagged backends with a mode, or the aggregated
fleet) or a peer's own P/D mode (`bench.peers.pd_peer_command`). Each run goes through
`sim.live.experiment.run_experiment` (the fleet brought already running); before the router
stops, its `/metrics` are read (kvgate's P/D decisions, fallbacks, decode legs), and after the
run every replica's (requests, engine TTFT, tokens by source), so each run also says where
the time went: the share of requests that reached a P, the tokens moved to D, P's and D's
engine TTFT, and, for kvgate, the client TTFT of split and local requests apart.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from bench.peers import PeerInstall, pd_peer_command
from sim.live.experiment import ExperimentResult, Router, RouterSite, Workload, run_experiment
from sim.live.processes import (
    ChildProcess,
    PDFleet,
    free_port,
    gateway_command,
    start_emulator,
    start_pd_emulator,
)

KVGATE_POLICY = "prefix-aware"  # kvgate's default profile, for D (and P) alike
SETTLE_S = 1.0  # after a router is ready, so its first decisions see the engines' metrics
PROGRESS_EVERY_S = 10.0


@dataclass(frozen=True, slots=True)
class FleetSpec:
    """Emulated replicas: `kind` vllm or sglang (a P/D fleet) or aggregated (role both)."""

    kind: str
    prefill: int
    decode: int
    profile: str
    model: str
    speedup: float

    @contextlib.contextmanager
    def launch(self, log_path: Path) -> Iterator[PDFleet]:
        """The running fleet's addresses (an aggregated fleet's replicas count as decode)."""
        if self.kind == "aggregated":
            child, urls = start_emulator(
                self.prefill + self.decode,
                self.profile,
                self.model,
                log_path,
                speedup=self.speedup,
            )
            with child:
                yield PDFleet([], urls)
            return
        child, fleet = start_pd_emulator(
            self.prefill,
            self.decode,
            self.kind,
            log_path,
            profile=self.profile,
            model=self.model,
            speedup=self.speedup,
        )
        with child:
            yield fleet


@dataclass(frozen=True, slots=True)
class RouterSpec:
    """One router of a comparison: `router` (kvgate or a peer) on a `fleet` kind; kvgate's
    P/D `mode` (None: a peer, or kvgate on the aggregated fleet)."""

    name: str
    router: str
    fleet: str
    mode: str | None = None


class _Running:
    """A fleet already running, as `run_experiment` takes it (launching is a no-op)."""

    def __init__(self, urls: Sequence[str], model: str) -> None:
        self._urls, self._model = list(urls), model

    @property
    def model(self) -> str:
        return self._model

    @contextlib.contextmanager
    def launch(self, log_dir: Path, tag: str) -> Iterator[Sequence[str]]:
        yield self._urls


def router_command(spec: RouterSpec, install: PeerInstall, fleet: PDFleet, port: int) -> list[str]:
    """The command line that starts `spec` on 127.0.0.1:`port` in front of `fleet`."""
    if spec.router != "kvgate":
        return pd_peer_command(
            install,
            port=port,
            prefill=fleet.prefill,
            decode=fleet.decode,
            metrics_port=free_port(),
        )
    quiet = ["--log-level", "warning"]
    if not fleet.prefill:
        return gateway_command(fleet.decode, KVGATE_POLICY, port=port, extra=quiet)
    backends = [
        f"{url},role=prefill" + (f",bootstrap_port={boot}" if boot is not None else "")
        for url, boot in fleet.prefill
    ]
    backends += [f"{url},role=decode" for url in fleet.decode]
    extra = ["--pd-protocol", spec.fleet, "--pd-mode", spec.mode or "conditional", *quiet]
    return gateway_command(backends, KVGATE_POLICY, port=port, extra=extra)


def _wait_ready(proc: ChildProcess, url: str, spec: RouterSpec, backends: int) -> None:
    if spec.router != "kvgate":
        proc.wait_for_http(url + "/health", timeout_s=60.0)
        return
    proc.wait_for_http(url + "/ready", timeout_s=60.0)
    deadline = time.monotonic() + 30.0
    while httpx.get(url + "/ready").json().get("healthy_backends", 0) < backends:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{url}: not every backend healthy after 30 s")
        time.sleep(0.1)


@dataclass(frozen=True, slots=True)
class LiveRun:
    """One run: the client's view, and the router's and replicas' metrics at its end."""

    result: ExperimentResult
    fleet: PDFleet
    router_metrics: str  # the router's /metrics text (kvgate only; else empty)
    replica_metrics: tuple[str, ...]  # each replica's /metrics text, fleet order


async def run(
    spec: RouterSpec,
    install: PeerInstall,
    fleet_spec: FleetSpec,
    workload: Workload,
    *,
    label: str,
    log_dir: Path,
) -> LiveRun:
    """`workload` through `spec` in front of a fresh `fleet_spec` fleet."""
    tag = label.replace("/", "-").replace(" ", "-")
    launched = fleet_spec.launch(log_dir / f"{tag}-emulator.log")
    fleet = await asyncio.to_thread(launched.__enter__)
    try:
        urls = [u for u, _ in fleet.prefill] + list(fleet.decode)
        scraped: list[str] = []

        @contextlib.contextmanager
        def start(site: RouterSite) -> Iterator[Router]:
            port = free_port()
            url = f"http://127.0.0.1:{port}"
            command = router_command(spec, install, fleet, port)
            log = site.log_dir / f"{site.tag}-router.log"
            with ChildProcess(command, log, cwd=site.log_dir.resolve()) as proc:
                proc.start()
                _wait_ready(proc, url, spec, len(urls))
                time.sleep(SETTLE_S)
                yield Router(url, {}, tuple(command))
                if spec.router == "kvgate":
                    scraped.append(httpx.get(url + "/metrics", timeout=10).text)

        result = await run_experiment(
            _Running(urls, fleet_spec.model),
            start,
            workload,
            label=label,
            log_dir=log_dir,
            progress_every_s=PROGRESS_EVERY_S,
        )
        async with httpx.AsyncClient(timeout=10) as client:
            replica_metrics = [(await client.get(u + "/metrics")).text for u in urls]
    finally:
        await asyncio.to_thread(launched.__exit__, None, None, None)
    return LiveRun(result, fleet, scraped[0] if scraped else "", tuple(replica_metrics))


def _samples(text: str) -> Iterator[tuple[str, dict[str, str], float]]:
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            yield s.name, s.labels, s.value


def _sum(text: str, name: str, **labels: str) -> float:
    return sum(
        v
        for n, lab, v in _samples(text)
        if n == name and all(lab.get(k) == x for k, x in labels.items())
    )


def _mean(total: float, n: float) -> float:
    return total / n if n else math.nan


def pd_figures(run: LiveRun) -> dict[str, Any]:
    """Where the time went in one run (see the module docstring); NaN where not measured."""
    n_prefill = len(run.fleet.prefill)
    prefill, decode = run.replica_metrics[:n_prefill], run.replica_metrics[n_prefill:]
    client_requests = len(run.result.results)

    def engine_ttft(texts: Sequence[str]) -> float:
        total = sum(_sum(t, "vllm:time_to_first_token_seconds_sum") for t in texts)
        return _mean(total, sum(_sum(t, "vllm:time_to_first_token_seconds_count") for t in texts))

    p_requests = sum(_sum(t, "vllm:e2e_request_latency_seconds_count") for t in prefill)
    moved = sum(
        _sum(t, "vllm:prompt_tokens_by_source_total", source="external_kv_transfer") for t in decode
    )
    out: dict[str, Any] = {
        "split_share": _mean(p_requests, client_requests),
        "moved_tokens_per_request": _mean(moved, client_requests),
        "prefill_engine_ttft_mean_s": engine_ttft(prefill),
        "decode_engine_ttft_mean_s": engine_ttft(decode),
    }
    ok = [r for r in run.result.results if r.error is None and r.ttft_s is not None]
    if run.router_metrics:
        m = run.router_metrics
        out["decisions"] = {
            f"{lab['path']}/{lab['why']}": int(v)
            for n, lab, v in _samples(m)
            if n == "kvgate_pd_decisions_total" and v
        }
        out["prefill_fallbacks"] = int(_sum(m, "kvgate_pd_prefill_fallbacks_total"))
        out["decode_leg_first_token_mean_s"] = _mean(
            _sum(m, "kvgate_pd_decode_first_token_seconds_sum"),
            _sum(m, "kvgate_pd_decode_first_token_seconds_count"),
        )
        split = [r.ttft_s for r in ok if r.prefill_backend and r.ttft_s is not None]
        local = [r.ttft_s for r in ok if not r.prefill_backend and r.ttft_s is not None]
        out["ttft_split_mean_s"] = _mean(sum(split), len(split))
        out["ttft_local_mean_s"] = _mean(sum(local), len(local))
    return out
