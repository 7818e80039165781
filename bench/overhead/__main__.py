"""Gateway overhead: the latency and CPU each router adds, under fixed-rate open-loop load.

`python -m bench overhead` (or `python -m bench.overhead`) starts near-zero-cost stub replicas
(`engine.py`; `kvgate emulate` costs a proxy's CPU per request, so it would be the bottleneck),
then for each target in turn — direct to one replica (the baseline), kvgate with each policy,
the peer routers of `peers.py` — offers a fixed rate of small chat completions (half streaming,
3 output tokens) with wrk (`wrk.py`: the open-loop method and its coordinated-omission limits),
rate after rate until the target stops keeping up. Per target and rate: achieved throughput,
latency percentiles, latency added over direct at the same rate (difference of percentiles),
CPU seconds per 1,000 requests of the router's process tree (/proc utime+stime, reaped children
included) and its peak RSS (VmHWM). Everything shares the machine's cores (wrk and the stubs
too, their CPU recorded): compare targets of one run; `--rounds N` sweeps every target N times
in a rotated order and reports medians (`rounds.py`). Writes `overhead.json`, `added_p99.png` and
`throughput.png` to `--out` (default out/bench).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench import REPO_ROOT
from bench.overhead.fleet import FLOORS, MODEL, StubFleet, start_stub_fleet
from bench.overhead.report import print_row, summarise, write_outputs
from bench.overhead.rounds import rotated, write_rounds
from bench.overhead.tracing import launch_traced
from bench.overhead.tuner import launch_tuned
from bench.overhead.usage import usage
from bench.overhead.wrk import WrkResult, ensure_wrk, run_wrk
from sim.live.processes import ChildProcess, free_port, start_redis, wait_for_workers

if TYPE_CHECKING:
    from bench.peers import PeerInstall

DEFAULT_TARGETS = (
    "direct",
    "kvgate:round-robin",
    "kvgate:least-in-flight",
    "kvgate:prefix-aware",
    "kvgate:estimated-ttft",
    "sglang-router",
    "vllm-router",
    "litellm",
)
# From LiteLLM's range (tens per second) to past every router's saturation on 2 cores (a
# target stops at its first rate not sustained, so the high rates cost only the fastest).
DEFAULT_RATES = (25, 100, 250, 375, 500, 750, 1000, 1500, 2000, 3000, 4000, 5000, 6000, 8000)


@dataclass(slots=True)
class Settings:
    """What one benchmark run does (all from the command line)."""

    targets: tuple[str, ...]
    rates: tuple[float, ...]
    duration_s: float
    warmup_s: float
    idle_s: float
    connections: int
    stream_fraction: float
    replicas: int
    out: Path
    rounds: int = 1


@dataclass(slots=True)
class Target:
    """A running router (or the bare replica): where to send, which pid to account."""

    name: str
    url: str
    pid: int
    version: str = ""
    command: list[str] = field(default_factory=list)
    headers: dict[str, str] = field(default_factory=dict)  # what every request must carry
    tuner_pid: int | None = None  # `kvgate tune` beside it (its CPU is not the router's)


@contextlib.contextmanager
def launch(spec: str, fleet: StubFleet, logs: Path) -> Iterator[Target]:
    """Start the router named by `spec` (`direct`, `kvgate:POLICY`, `PEER[:POLICY]`;
    `kvgate+wN+redis:POLICY` adds `--workers N` and `--redis` with a redis-server of its
    own, whose CPU is not the router's)."""
    if spec == "direct":
        stubs = fleet.process
        yield Target("direct", fleet.urls[0], stubs.pid, command=stubs.command)
        return
    if spec in FLOORS:  # the least a Python relay does (bench.overhead.floor, .asgi_floor)
        port = free_port()
        cmd = [sys.executable, "-m", FLOORS[spec], "--port", str(port)]
        cmd += [arg for url in fleet.urls for arg in ("--backend", url)]
        env = {"PYTHONPATH": str(REPO_ROOT)}
        with ChildProcess(cmd, logs / f"{spec}.log", env=env).start() as proc:
            url = f"http://127.0.0.1:{port}"
            proc.wait_for_http(url + "/v1/models")
            yield Target(spec, url, proc.pid, command=proc.command)
        return
    from bench.peers import PEER_HEADERS, ensure_peer, start_peer

    name, _, policy = spec.partition(":")
    if name == "kvgate+otel":  # tracing on, exporting to a discarding OTLP receiver
        with launch_traced(policy or "prefix-aware", fleet.urls, logs) as (proc, url, _):
            yield Target(spec, url, proc.pid, command=proc.command)
        return
    if name in ("kvgate+tune", "kvgate+tune+idle", "kvgate+burn", "kvgate+record"):
        # recording, with `kvgate tune` (or a control, bench.overhead.tuner) beside it
        beside = name.removeprefix("kvgate+")
        with launch_tuned(policy or "prefix-aware", fleet.urls, logs, beside) as (proc, url, by):
            pid = by.pid if by is not None else None
            yield Target(spec, url, proc.pid, command=proc.command, tuner_pid=pid)
        return
    name, _, source = name.partition("@")
    name, *options = name.split("+")
    install = ensure_peer(name)
    if options:
        with _kvgate_with(options, install, fleet, policy, logs) as target:
            yield dataclasses.replace(target, name=spec)
        return
    if source:  # `kvgate@DIR:POLICY`: kvgate from another source tree, for before/after runs
        proc, url = _start_kvgate_from(source, install, fleet, policy, logs)
        with proc:
            yield Target(spec, url, proc.pid, f"{install.version} ({source})", proc.command)
        return
    proc, url = start_peer(
        install, worker_urls=fleet.urls, model=MODEL, policy=policy or "default", out_dir=logs
    )
    with proc:
        headers = PEER_HEADERS.get(name, {})
        yield Target(spec, url, proc.pid, install.version, proc.command, headers)


@contextlib.contextmanager
def _kvgate_with(
    options: list[str], install: PeerInstall, fleet: StubFleet, policy: str, logs: Path
) -> Iterator[Target]:
    """kvgate with `wN` (`--workers N`) and `redis` (`--redis`, a fresh redis-server)."""
    from bench.peers import start_peer

    if install.name != "kvgate" or any(o != "redis" and not o[1:].isdigit() for o in options):
        raise ValueError(f"options {options}: only kvgate takes wN and redis")
    extra: list[str] = []
    workers = next((int(o[1:]) for o in options if o.startswith("w")), 1)
    with contextlib.ExitStack() as stack:
        if "redis" in options:
            redis, url = start_redis(logs / f"redis-{'-'.join(options)}.log")
            stack.enter_context(redis)
            extra += ["--redis", url]
        if workers > 1:
            extra += ["--workers", str(workers)]
        proc, url = start_peer(
            install,
            worker_urls=fleet.urls,
            model=MODEL,
            policy=policy or "default",
            out_dir=logs,
            log_name=f"kvgate-{'-'.join(options)}-{policy}",
            extra_args=extra,
        )
        stack.enter_context(proc)
        if workers > 1:  # all of them listening, or the first takes every connection
            wait_for_workers(url, workers)
        yield Target("", url, proc.pid, install.version, proc.command)


def _start_kvgate_from(
    source: str, install: PeerInstall, fleet: StubFleet, policy: str, logs: Path
) -> tuple[ChildProcess, str]:
    """kvgate from the source tree `source`: its own `.venv` interpreter when it has one
    (an editable install's import hook would otherwise load this tree's code whatever
    PYTHONPATH says), else this one with `source` first on PYTHONPATH."""
    from bench.peers import peer_command

    own = Path(source) / ".venv" / "bin" / "python"
    if own.exists():
        install = dataclasses.replace(install, python=own)
    port = free_port()
    command = peer_command(
        install, port=port, worker_urls=fleet.urls, model=MODEL, policy=policy or "default"
    )
    log_path = logs / f"kvgate-{Path(source).name}-{policy}.log"
    env = {"PYTHONPATH": str(Path(source).resolve())}
    url = f"http://127.0.0.1:{port}"
    # Run from `source`: `python -m` puts the working directory first on sys.path.
    proc = ChildProcess(command, log_path, env=env, cwd=Path(source).resolve()).start()
    try:
        proc.wait_for_http(url + "/v1/models")
    except BaseException:
        proc.stop()
        raise
    return proc, url


def measure_target(spec: str, fleet: StubFleet, settings: Settings, wrk: str) -> dict[str, Any]:
    """Sweep the rates against one target; stop after the first rate it cannot sustain."""
    runs: list[dict[str, Any]] = []
    with launch(spec, fleet, settings.out / "logs") as target:
        own_pid = target.pid if spec != "direct" else None
        shoot = functools.partial(
            run_wrk,
            wrk,
            target.url,
            connections=settings.connections,
            model=MODEL,
            stream_fraction=settings.stream_fraction,
            headers=target.headers,
        )
        shoot(rate=settings.rates[0], duration_s=settings.warmup_s)
        idle = _idle_cpu(own_pid, settings.idle_s) if own_pid else None
        for rate in settings.rates:
            row = _measure_rate(
                shoot,
                rate,
                duration_s=settings.duration_s,
                pid=own_pid,
                fleet_pid=fleet.process.pid,
                idle_cpu_per_s=idle,
                tuner_pid=target.tuner_pid,
            )
            runs.append(row)
            print_row(spec, row)
            if not row["sustained"]:
                break
        tuner = {"tuner_cpu_s": usage(target.tuner_pid).cpu_s} if target.tuner_pid else {}
        return {
            "target": spec,
            "version": target.version,
            "command": target.command,
            "idle_cpu_per_s": idle,
            "runs": runs,
            **tuner,
        }


def _idle_cpu(pid: int, seconds: float) -> float:
    """CPU seconds per second the router burns with no traffic (health probes, scrapes)."""
    before = usage(pid).cpu_s
    time.sleep(seconds)
    return (usage(pid).cpu_s - before) / seconds


def _measure_rate(
    shoot: Callable[..., WrkResult],
    rate: float,
    *,
    duration_s: float,
    pid: int | None,
    fleet_pid: int,
    idle_cpu_per_s: float | None,
    tuner_pid: int | None = None,
) -> dict[str, Any]:
    """One wrk run at `rate`, with the router's, the stubs' (and a tuner's) CPU over it."""
    before = usage(pid) if pid else None
    fleet_before = usage(fleet_pid).cpu_s
    tuner_before = usage(tuner_pid).cpu_s if tuner_pid else None
    t0 = time.perf_counter()
    result = shoot(rate=rate, duration_s=duration_s)
    wall = time.perf_counter() - t0
    after = usage(pid) if pid else None
    row: dict[str, Any] = {"rate": rate, **asdict(result), "sustained": result.sustained}
    row["wall_s"] = wall
    row["stub_cpu_s"] = usage(fleet_pid).cpu_s - fleet_before
    if tuner_pid and tuner_before is not None:
        row["tuner_cpu_s"] = usage(tuner_pid).cpu_s - tuner_before
    if before is not None and after is not None:
        n = max(1, result.requests)
        row["cpu_s"] = after.cpu_s - before.cpu_s
        row["cpu_s_per_1k"] = 1000 * row["cpu_s"] / n
        if idle_cpu_per_s is not None:
            # What the requests cost beyond the router's idle background work.
            row["cpu_s_per_1k_net"] = 1000 * (row["cpu_s"] - idle_cpu_per_s * wall) / n
        row["peak_rss_bytes"] = after.peak_rss_bytes
    return row


def _parse(argv: Sequence[str] | None) -> Settings:
    p = argparse.ArgumentParser(
        prog="python -m bench overhead", description=__doc__.splitlines()[0]
    )
    p.add_argument(
        "--targets",
        default=",".join(DEFAULT_TARGETS),
        help="comma-separated: direct, floor (the least a Python relay does: "
        "bench.overhead.floor), floor-asgi (the same on kvgate's server and upstream "
        "client: bench.overhead.asgi_floor), kvgate:POLICY, sglang-router, vllm-router, "
        "litellm (PEER:POLICY picks a peer's policy); kvgate+w2:POLICY runs --workers 2, "
        "kvgate+redis:POLICY shares state through a redis-server of its own, "
        "kvgate+otel:POLICY traces every request, exporting over OTLP to a sink, "
        "kvgate+tune:POLICY records its traffic with `kvgate tune` (shadow, niced) beside "
        "it, kvgate+tune+idle:POLICY with the tuner at the idle scheduling class; controls: "
        "kvgate+record:POLICY records alone, kvgate+burn:POLICY beside a niced process "
        "spinning as long as the tuner evaluates",
    )
    p.add_argument("--rates", default=",".join(map(str, DEFAULT_RATES)), help="requests/s")
    p.add_argument("--duration", type=float, default=6.0, help="seconds per rate (default 6)")
    p.add_argument("--warmup", type=float, default=2.0, help="unrecorded seconds first")
    p.add_argument("--idle", type=float, default=3.0, help="seconds of idle CPU measured")
    p.add_argument("--connections", type=int, default=64, help="wrk connections (default 64)")
    p.add_argument("--stream-fraction", type=float, default=0.5, help="share streaming (0.5)")
    p.add_argument("--replicas", type=int, default=2, help="stub replicas (default 2)")
    p.add_argument(
        "--quick", action="store_true", help="3 s per rate, rates 25,100,250,500,1000,2000"
    )
    p.add_argument("--out", default="out/bench", help="output directory (default out/bench)")
    p.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="sweep every target this many times, the order rotated (bench/overhead/rounds.py)",
    )
    a = p.parse_args(argv)
    rates = tuple(float(r) for r in a.rates.split(",") if r)
    duration = a.duration
    if a.quick:
        rates, duration = (25.0, 100.0, 250.0, 500.0, 1000.0, 2000.0), 3.0
    targets = tuple(t for t in a.targets.split(",") if t)
    if "direct" in targets:  # the baseline goes first so every later row can be compared
        targets = ("direct", *(t for t in targets if t != "direct"))
    return Settings(
        targets,
        rates,
        duration,
        a.warmup,
        a.idle,
        a.connections,
        a.stream_fraction,
        a.replicas,
        Path(a.out),
        max(1, a.rounds),
    )


def main(argv: Sequence[str] | None = None) -> int:
    settings = _parse(argv)
    wrk = ensure_wrk()
    settings.out.mkdir(parents=True, exist_ok=True)
    total = len(settings.targets)
    print(
        f"overhead: {total} targets x up to {len(settings.rates)} rates x "
        f"{settings.duration_s:g} s, {os.cpu_count()} cores shared",
        file=sys.stderr,
    )
    fleet = start_stub_fleet(settings.replicas, settings.out / "logs" / "stub-engine.log")
    reports: list[dict[str, Any]] = []
    try:
        for r in range(settings.rounds):
            if settings.rounds > 1:
                print(f"round {r + 1}/{settings.rounds}", file=sys.stderr, flush=True)
            measured, failed = _sweep(rotated(settings.targets, r), fleet, settings, wrk)
            reports.append(summarise(measured, failed, settings, fleet.process.command))
    finally:
        fleet.process.stop()
    if settings.rounds > 1:
        write_rounds(reports, settings.out)
    else:
        write_outputs(reports[0], settings.out)
    return 1 if any(rep["failed"] for rep in reports) else 0


def _sweep(
    targets: Sequence[str], fleet: StubFleet, settings: Settings, wrk: str
) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """Every target's sweep of the rates, one after the other."""
    measured: list[dict[str, Any]] = []
    failed: dict[str, str] = {}
    for i, spec in enumerate(targets, 1):
        print(f"[{i}/{len(targets)}] {spec}", file=sys.stderr, flush=True)
        try:
            measured.append(measure_target(spec, fleet, settings, wrk))
        except (RuntimeError, TimeoutError, OSError, subprocess.SubprocessError) as exc:
            print(f"  {spec} failed: {exc}", file=sys.stderr)
            failed[spec] = str(exc)[-2000:]
    return measured, failed


if __name__ == "__main__":
    sys.exit(main())
