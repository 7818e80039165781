"""One live run of the regime-switch workload: a fresh `kvgate emulate` fleet, a gateway
with a config file (a fixed profile, or the recording and `tuning:` for the tuner), and with
`tuner` a `kvgate tune` process beside it (niced: it must not take the engines' CPU first).
The gateway's `/admin/tuning` is read before it stops; the tuner's CPU is what it reported."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx
import yaml

from bench.regime.grid import FleetSpec
from bench.tune.phases import MODEL
from routing.config.profiles import ProfileSpec
from sim.live.experiment import (
    ExperimentResult,
    Fleet,
    Router,
    RouterFactory,
    RouterSite,
    open_loop,
    run_experiment,
)
from sim.live.processes import ChildProcess, kvgate_command, start_gateway
from sim.workloads.open_loop import TimedRequest


def write_config(
    path: Path,
    policy: str,
    profiles: Mapping[str, ProfileSpec],
    tuning: Mapping[str, Any] | None = None,
) -> Path:
    """The gateway's config file: `policy` (one of `profiles` or a built-in) and, for a
    tuned run, the recording beside it and the `tuning:` section."""
    raw: dict[str, Any] = {
        "server": {"access_log": False},
        "routing": {
            "policy": policy,
            "profiles": {
                n: p.model_dump(mode="json", exclude_unset=True) for n, p in profiles.items()
            },
        },
    }
    if tuning is not None:
        raw["server"]["record_path"] = str(path.with_suffix(".jsonl"))
        # The bench starts the tuner itself (its own log), not the gateway.
        raw["tuning"] = {**tuning, "spawn": False}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(raw, sort_keys=False), encoding="utf-8")
    return path


def gateway_with_tuner(
    config: Path, policy: str, *, tuner: bool, seen: dict[str, Any]
) -> RouterFactory:
    """`kvgate serve --config FILE` (and `kvgate tune` beside it); `seen` gets the gateway's
    final `/admin/tuning`."""

    @contextlib.contextmanager
    def start(site: RouterSite) -> Iterator[Router]:
        log = site.log_dir / f"{site.tag}-gateway.log"
        process, url = start_gateway(site.replica_urls, policy, log, ["--config", str(config)])
        with process:
            child = None
            if tuner:
                command = kvgate_command("tune", "--gateway", url, "--config", str(config))
                log_path = site.log_dir / f"{site.tag}-tuner.log"
                child = ChildProcess(["nice", "-n", "10", *command], log_path)
                child.start()
            try:
                yield Router(url, {}, tuple(process.command))
            finally:
                with contextlib.suppress(httpx.HTTPError):
                    seen.update(httpx.get(url + "/admin/tuning", timeout=10).json())
                if child is not None:
                    child.stop()

    return start


async def run_live(
    label: str,
    requests: Sequence[TimedRequest],
    fleet: FleetSpec,
    router: RouterFactory,
    log_dir: Path,
) -> ExperimentResult:
    return await run_experiment(
        Fleet(fleet.replicas, fleet.profile, MODEL),
        router,
        open_loop(label, list(requests)),
        label=label,
        log_dir=log_dir,
        progress_every_s=15.0,
    )


def phase_ttfts(
    result: ExperimentResult,
    requests: Sequence[TimedRequest],
    spans: Sequence[tuple[str, float, float]],
) -> dict[str, list[float]]:
    """The TTFTs of the requests that succeeded, by the phase their send time falls in."""
    out: dict[str, list[float]] = {name: [] for name, _, _ in spans}
    for r in result.results:
        if r.error is not None or r.ttft_s is None:
            continue
        at = requests[int(r.request.removeprefix("req-"))].at_s
        for name, start, end in spans:
            if start <= at < end or (name == spans[-1][0] and at >= start):
                out[name].append(r.ttft_s)
                break
    return out


def window_ttfts(
    result: ExperimentResult, requests: Sequence[TimedRequest], start: float, end: float
) -> list[float]:
    """The TTFTs of the requests sent in [start, end) seconds from the run's start."""
    return [
        r.ttft_s
        for r in result.results
        if r.error is None
        and r.ttft_s is not None
        and start <= requests[int(r.request.removeprefix("req-"))].at_s < end
    ]
