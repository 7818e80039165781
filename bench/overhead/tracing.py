"""What tracing costs kvgate: CPU per request with OTLP export on and off, side by side.

`python -m bench tracing-overhead` starts the overhead bench's stub replicas, a discarding OTLP
receiver in a process of its own (`bench.otlp_receiver`) and two `kvgate serve` in front of the
same stubs: `kvgate:POLICY` and `kvgate+otel:POLICY` (`OTEL_TRACES_EXPORTER=otlp`, every request
sampled, exporting to the receiver). In each round both get a wrk run at `--rate` at the same
time (the overhead bench's open-loop chat requests, half streaming), so the shared machine's
other work weighs on both alike. CPU is each kvgate process's own (export and gRPC threads
included; the kernel's process CPU clock, in ns), net of its idle use, per 1,000 requests; the
receiver's is not counted. Reported per round and as medians: the traced/untraced ratio of CPU
per request, latency percentiles, and the spans received (3 a request). Writes `tracing.json`
and `tracing.png` to `--out`; `kvgate+otel:POLICY` is also a target of `python -m bench overhead`
(`launch_traced`). Why side by side: docs/decisions/0015-tracing.md.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import statistics
import sys
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench import REPO_ROOT
from bench.overhead.fleet import MODEL, start_stub_fleet
from bench.overhead.usage import thread_cpu, usage
from bench.overhead.wrk import ensure_wrk, run_wrk
from sim.live.processes import ChildProcess, free_port, gateway_command
from sim.plots import PLOTS_SKIPPED, PlotsUnavailable, pyplot

TRACED = "kvgate+otel"


@dataclass(frozen=True, slots=True)
class Sink:
    """The discarding OTLP receiver's process and its two ports."""

    process: ChildProcess
    grpc_port: int
    http_port: int

    def endpoint(self, protocol: str) -> str:
        port = self.grpc_port if protocol == "grpc" else self.http_port
        return f"http://127.0.0.1:{port}"

    def received(self) -> int | None:
        """Spans received, from the line the receiver logs when stopped."""
        text = self.process.log_path.read_text(errors="replace")
        found = re.findall(r"received (\d+) spans", text)
        return int(found[-1]) if found else None


@contextlib.contextmanager
def start_sink(logs: Path) -> Iterator[Sink]:
    cmd = [sys.executable, "-m", "bench.otlp_receiver"]
    proc = ChildProcess(cmd, logs / "otlp-sink.log", env={"PYTHONPATH": str(REPO_ROOT)})
    with proc.start():
        grpc_m, http_m = proc.wait_for_line(r"^(grpc|http) (\d+)$", 2, timeout_s=30)
        ports = {grpc_m.group(1): int(grpc_m.group(2)), http_m.group(1): int(http_m.group(2))}
        yield Sink(proc, ports["grpc"], ports["http"])


def tracing_env(endpoint: str, protocol: str) -> dict[str, str | None]:
    """Tracing on, every request sampled, exported to `endpoint` over `protocol`."""
    return {
        "OTEL_TRACES_EXPORTER": "otlp",
        "OTEL_EXPORTER_OTLP_PROTOCOL": protocol,
        "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
        "OTEL_TRACES_SAMPLER": "parentbased_always_on",
        "OTEL_SERVICE_NAME": "kvgate-bench",
    }


@contextlib.contextmanager
def start_kvgate(
    urls: Sequence[str], policy: str, log_path: Path, env: dict[str, str | None] | None = None
) -> Iterator[tuple[ChildProcess, str]]:
    """`kvgate serve` (this interpreter) in front of `urls`, with `env` added."""
    port = free_port()
    cmd = gateway_command(urls, policy, port=port, extra=("--log-level", "warning"))
    base = {"OTEL_TRACES_EXPORTER": None, "OTEL_SDK_DISABLED": None}
    with ChildProcess(cmd, log_path, env={**base, **(env or {})}).start() as proc:
        url = f"http://127.0.0.1:{port}"
        proc.wait_for_http(url + "/v1/models")
        yield proc, url


@contextlib.contextmanager
def launch_traced(
    policy: str,
    urls: Sequence[str],
    logs: Path,
    protocol: str = "grpc",
    extra_env: dict[str, str] | None = None,
) -> Iterator[tuple[ChildProcess, str, Sink]]:
    """kvgate with tracing on, and the sink it exports to (`kvgate+otel:POLICY`)."""
    with start_sink(logs) as sink:
        env = {**tracing_env(sink.endpoint(protocol), protocol), **(extra_env or {})}
        with start_kvgate(urls, policy, logs / f"{TRACED}-{policy}.log", env) as (proc, url):
            yield proc, url, sink


@dataclass(slots=True)
class Settings:
    rate: float
    rounds: int
    otel_env: dict[str, str]
    duration_s: float
    warmup_s: float
    idle_s: float
    policy: str
    protocol: str
    connections: int
    out: Path


def _parse(argv: Sequence[str] | None) -> Settings:
    p = argparse.ArgumentParser(
        prog="python -m bench tracing-overhead", description=__doc__.splitlines()[0]
    )
    p.add_argument("--rate", type=float, default=500.0, help="requests/s (default 500)")
    p.add_argument("--rounds", type=int, default=5, help="rounds (default 5)")
    p.add_argument("--duration", type=float, default=8.0, help="s per target per round (8)")
    p.add_argument("--warmup", type=float, default=3.0, help="unrecorded s per target first")
    p.add_argument("--idle", type=float, default=3.0, help="s of idle CPU measured")
    p.add_argument("--policy", default="prefix-aware", help="routing policy (prefix-aware)")
    p.add_argument("--protocol", default="grpc", choices=("grpc", "http/protobuf"))
    p.add_argument("--connections", type=int, default=64, help="wrk connections (64)")
    p.add_argument(
        "--otel-env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="another variable for the traced gateway (e.g. OTEL_BSP_SCHEDULE_DELAY=1000)",
    )
    p.add_argument("--quick", action="store_true", help="2 rounds of 4 s")
    p.add_argument("--out", default="out/bench/tracing", help="output directory")
    a = p.parse_args(argv)
    rounds, duration = (2, 4.0) if a.quick else (a.rounds, a.duration)
    extra = dict(kv.partition("=")[::2] for kv in a.otel_env)
    return Settings(
        a.rate, rounds, extra, duration, a.warmup, a.idle, a.policy, a.protocol, a.connections,
        Path(a.out),
    )  # fmt: skip


def cpu_s(pid: int) -> float:
    """CPU seconds of process `pid` so far (all its threads, exited ones included), read in
    ns from the kernel's CPU clock of that process (the id `clock_getcpuclockid` gives);
    /proc's 10 ms ticks where it cannot be read. Ticks were too coarse for the idle CPU:
    2-6 of them in 3 s, and one more or less moved a run's net ratio by ~1.5 points
    (decisions/0020)."""
    try:
        return time.clock_gettime_ns(((~pid) << 3) | 2) / 1e9  # CPUCLOCK_SCHED, process
    except OSError:
        return usage(pid).cpu_s


def _idle_cpu(pid: int, seconds: float) -> float:
    before = cpu_s(pid)
    time.sleep(seconds)
    return (cpu_s(pid) - before) / seconds


def _one_run(wrk: str, url: str, pid: int, idle: float, s: Settings) -> dict[str, Any]:
    before, threads = cpu_s(pid), thread_cpu(pid)  # threads: in ticks (another process's
    # threads have no CPU clock to read)
    t0 = time.perf_counter()
    result = run_wrk(
        wrk, url, rate=s.rate, duration_s=s.duration_s, connections=s.connections,
        model=MODEL, stream_fraction=0.5,
    )  # fmt: skip
    wall = time.perf_counter() - t0
    cpu = cpu_s(pid) - before
    main = thread_cpu(pid).get(pid, 0.0) - threads.get(pid, 0.0)
    n = max(1, result.requests)
    return {
        **asdict(result),
        "sustained": result.sustained,
        "wall_s": wall,
        "cpu_s": cpu,
        "cpu_s_per_1k": 1000 * cpu / n,
        "cpu_s_per_1k_net": 1000 * (cpu - idle * wall) / n,
        # The event loop's thread, and the others (the export thread, gRPC's).
        "main_thread_cpu_s_per_1k": 1000 * main / n,
        "other_threads_cpu_s_per_1k": 1000 * (cpu - main) / n,
    }


def measure(s: Settings) -> dict[str, Any]:
    """Both gateways up at once; `s.rounds` rounds of one run each, order rotated."""
    wrk = ensure_wrk()
    logs = s.out / "logs"
    plain, traced = f"kvgate:{s.policy}", f"{TRACED}:{s.policy}"
    fleet = start_stub_fleet(2, logs / "stub-engine.log")
    rounds: list[dict[str, dict[str, Any]]] = []
    try:
        with contextlib.ExitStack() as stack:
            off_proc, off_url = stack.enter_context(
                start_kvgate(fleet.urls, s.policy, logs / f"kvgate-{s.policy}.log")
            )
            on_proc, on_url, sink = stack.enter_context(
                launch_traced(s.policy, fleet.urls, logs, s.protocol, s.otel_env)
            )
            targets = {plain: (off_proc.pid, off_url), traced: (on_proc.pid, on_url)}
            warm = {  # connections opened, caches warm
                name: run_wrk(wrk, url, rate=s.rate, duration_s=s.warmup_s,
                              connections=s.connections, model=MODEL, stream_fraction=0.5)
                for name, (_, url) in targets.items()
            }  # fmt: skip
            idle = {name: _idle_cpu(pid, s.idle_s) for name, (pid, _) in targets.items()}
            names = (plain, traced)
            with ThreadPoolExecutor(2) as pool:
                for r in range(s.rounds):
                    # Both at once: whatever else the machine does hits both alike.
                    runs = {
                        name: pool.submit(_one_run, wrk, targets[name][1], targets[name][0],
                                          idle[name], s)
                        for name in names
                    }  # fmt: skip
                    row = {name: run.result() for name, run in runs.items()}
                    for name in names:
                        _progress(r, s.rounds, name, row[name])
                    rounds.append(row)
            requests_traced = warm[traced].requests + sum(r[traced]["requests"] for r in rounds)
            stack.close()  # the sink logs what it received as it stops
            received = sink.received()
    finally:
        fleet.process.stop()
    return _summary(
        s, rounds, names=(plain, traced), idle=idle, received=received, requests=requests_traced
    )


def _progress(r: int, rounds: int, name: str, run: dict[str, Any]) -> None:
    print(
        f"  [round {r + 1}/{rounds}] {name:<26} {run['achieved_rps']:6.1f}/s "
        f"p50 {run['p50_s'] * 1e3:5.2f} ms p99 {run['p99_s'] * 1e3:6.2f} ms "
        f"cpu/1k {run['cpu_s_per_1k']:.3f} s (net {run['cpu_s_per_1k_net']:.3f}; "
        f"loop {run['main_thread_cpu_s_per_1k']:.3f}, other threads "
        f"{run['other_threads_cpu_s_per_1k']:.3f}) "
        f"err {run['errors']} late {run['late']}",
        file=sys.stderr,
        flush=True,
    )


def _summary(
    s: Settings,
    rounds: list[dict[str, dict[str, Any]]],
    *,
    names: tuple[str, str],
    idle: dict[str, float],
    received: int | None,
    requests: int,
) -> dict[str, Any]:
    plain, traced = names

    def med(name: str, key: str) -> float:
        return float(statistics.median(row[name][key] for row in rounds))

    ratios = [row[traced]["cpu_s_per_1k_net"] / row[plain]["cpu_s_per_1k_net"] for row in rounds]
    gross = [row[traced]["cpu_s_per_1k"] / row[plain]["cpu_s_per_1k"] for row in rounds]
    return {
        "benchmark": "tracing overhead: kvgate CPU per request, OTLP export on vs off",
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {"cpus": os.cpu_count(), "load_avg": os.getloadavg()},
        "settings": {k: str(v) if isinstance(v, Path) else v for k, v in asdict(s).items()},
        "command": "python -m bench tracing-overhead " + " ".join(sys.argv[2:]),
        "idle_cpu_per_s": idle,
        "rounds": rounds,
        "median": {
            name: {
                "cpu_s_per_1k_net": med(name, "cpu_s_per_1k_net"),
                "cpu_s_per_1k": med(name, "cpu_s_per_1k"),
                "main_thread_cpu_s_per_1k": med(name, "main_thread_cpu_s_per_1k"),
                "other_threads_cpu_s_per_1k": med(name, "other_threads_cpu_s_per_1k"),
                "p50_s": med(name, "p50_s"),
                "p99_s": med(name, "p99_s"),
            }
            for name in (plain, traced)
        },
        "cpu_ratio_per_round": ratios,
        "cpu_ratio_median": statistics.median(ratios),
        "cpu_ratio_gross_median": statistics.median(gross),
        "spans_received": received,
        "traced_requests": requests,  # warm-up included: the sink counts its spans too
        "spans_per_traced_request": received / requests if received else None,
        "sustained": all(run["sustained"] for row in rounds for run in row.values()),
    }


def _plot(report: dict[str, Any], out: Path) -> None:
    plt = pyplot()
    names = list(report["median"])
    fig, ax = plt.subplots(figsize=(6.5, 3.8))
    for i, name in enumerate(names):
        values = [row[name]["cpu_s_per_1k_net"] * 1e3 for row in report["rounds"]]
        ax.plot([i] * len(values), values, "o", alpha=0.6)
        ax.bar(i, statistics.median(values), alpha=0.35, width=0.5)
    ax.set_xticks(range(len(names)), names)
    ax.set_ylabel("CPU ms per request (net of idle)")
    rate = report["settings"]["rate"]
    ax.set_title(
        f"kvgate at {rate:g} req/s: tracing on / off = {report['cpu_ratio_median']:.3f} (median)"
    )
    fig.tight_layout()
    fig.savefig(out / "tracing.png", dpi=120)
    plt.close(fig)


def main(argv: Sequence[str] | None = None) -> int:
    s = _parse(argv)
    s.out.mkdir(parents=True, exist_ok=True)
    print(
        f"tracing-overhead: {s.rounds} rounds x 2 gateways x {s.duration_s:g} s at "
        f"{s.rate:g}/s, OTLP over {s.protocol}, {os.cpu_count()} cores shared",
        file=sys.stderr,
    )
    report = measure(s)
    (s.out / "tracing.json").write_text(json.dumps(report, indent=2) + "\n")
    m = report["median"]
    for name, row in m.items():
        print(
            f"{name:<26} cpu/1k net {row['cpu_s_per_1k_net']:.3f} s  "
            f"p50 {row['p50_s'] * 1e3:.2f} ms  p99 {row['p99_s'] * 1e3:.2f} ms",
            file=sys.stderr,
        )
    print(
        f"CPU per request, tracing on / off: median {report['cpu_ratio_median']:.3f} "
        f"(rounds: {', '.join(f'{r:.3f}' for r in report['cpu_ratio_per_round'])}); "
        f"spans received {report['spans_received']} "
        f"({report['spans_per_traced_request'] or 0:.2f} a traced request)",
        file=sys.stderr,
    )
    try:
        _plot(report, s.out)
    except PlotsUnavailable:
        print(PLOTS_SKIPPED, file=sys.stderr)
    print(f"wrote {s.out / 'tracing.json'}", file=sys.stderr)
    return 0 if report["sustained"] else 1


if __name__ == "__main__":
    sys.exit(main())
