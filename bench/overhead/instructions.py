"""Instructions per request of kvgate, counted by valgrind's callgrind: an A/B measure of CPU
work that a shared, noisy machine cannot blur (CPU seconds it can).

Starts the stub replicas (`engine.py`), then kvgate under `valgrind --tool=callgrind`; warms it
up, zeroes the counters (`callgrind_control --zero`), sends `--requests` of the overhead bench's
chat completions (half streaming, a few keep-alive connections), dumps the counters and prints
instructions per request. `--idle S` also counts S seconds without traffic and subtracts that
rate over the run (`ir_per_request_net`). Under valgrind the gateway runs ~20x slower while its
timers keep wall time, so it scrapes engine metrics every `--scrape-interval` s (1; fresh for
ten), not every 50 ms. `--source DIR` runs the gateway from another tree (the commit before a
change, say): the same command before and after gives the change's cost or saving, and the dump
read with `callgrind_annotate --inclusive=yes` says where the instructions go, by C function.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from bench import REPO_ROOT
from bench.overhead.fleet import FLOORS, MODEL, start_stub_fleet
from sim.live.processes import ChildProcess, free_port, gateway_command

PROMPT = "Say ok three times."


def request_bytes(host: str, stream: bool, model: str = MODEL) -> bytes:
    """The overhead bench's request (as `wrk_open_loop.lua` sends it), keep-alive."""
    body = (
        f'{{"model":"{model}","messages":[{{"role":"system","content":"You are a terse '
        f'assistant."}},{{"role":"user","content":"{PROMPT}"}}],"max_tokens":3,'
        f'"stream":{"true" if stream else "false"}}}'
    ).encode()
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: {host}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


async def _read_response(reader: asyncio.StreamReader) -> int:
    """One response off a keep-alive connection; its status code."""
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    lower = head.lower()
    match = re.search(rb"\r\ncontent-length:\s*(\d+)", lower)
    if match:
        await reader.readexactly(int(match.group(1)))
    elif b"transfer-encoding: chunked" in lower:
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
            await reader.readexactly(size + 2)
            if size == 0:
                break
    else:
        raise RuntimeError(f"response without a length: {head!r}")
    return status


async def send(port: int, count: int, connections: int, stream_every: int = 2) -> int:
    """`count` requests over `connections` keep-alive connections (every `stream_every`-th
    streams); the number that did not answer 200."""
    host = f"127.0.0.1:{port}"
    plain, stream = request_bytes(host, False), request_bytes(host, True)
    issued = 0
    failed = 0

    async def worker() -> None:
        nonlocal issued, failed
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            while issued < count:
                issued += 1
                writer.write(stream if stream_every and issued % stream_every == 0 else plain)
                if await _read_response(reader) != 200:
                    failed += 1
        finally:
            writer.close()

    await asyncio.gather(*(worker() for _ in range(connections)))
    return failed


def _control(pid: int, *args: str) -> None:
    subprocess.run(["callgrind_control", *args, str(pid)], check=True, capture_output=True)


def _total_ir(dump: Path) -> int:
    """The `totals:` (or `summary:`) line of a callgrind dump: instructions executed."""
    for line in dump.read_text(errors="replace").splitlines():
        if line.startswith(("totals:", "summary:")):
            return int(line.split()[1])
    raise RuntimeError(f"{dump}: no totals line")


def _wait_dump(out: Path, before: set[Path], timeout_s: float = 120.0) -> Path:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        new = sorted(set(out.parent.glob(out.name + ".*")) - before)
        done = [p for p in new if _complete(p)]
        if done:
            return done[-1]
        time.sleep(0.5)
    raise TimeoutError("callgrind wrote no dump")


def _complete(path: Path) -> bool:
    try:
        return any(
            line.startswith("totals:")
            for line in path.read_text(errors="replace")[-4096:].splitlines()
        )
    except OSError:
        return False


def _dump(pid: int, out: Path) -> Path:
    before = set(out.parent.glob(out.name + ".*"))
    _control(pid, "--dump")
    return _wait_dump(out, before)


def _command(urls: Sequence[str], policy: str, port: int, config: Path) -> list[str]:
    """kvgate with `policy`, or the floor `policy` names (`floor`, `floor-asgi`)."""
    if policy in FLOORS:
        cmd = [sys.executable, "-m", FLOORS[policy], "--port", str(port)]
        return cmd + [arg for url in urls for arg in ("--backend", url)]
    extra = ("--log-level", "warning", "--config", str(config))
    return gateway_command(urls, policy, port=port, extra=extra)


def measure(
    *,
    policy: str,
    requests: int,
    warmup: int,
    connections: int,
    idle_s: float,
    out: Path,
    scrape_interval_s: float = 1.0,
    source: Path = REPO_ROOT,
    config_extra: str = "",
) -> dict[str, float]:
    """Start the stubs and kvgate under callgrind; instructions per request (and per idle
    second when `idle_s` > 0)."""
    if not shutil.which("valgrind"):
        raise RuntimeError("valgrind is not installed (Debian package valgrind)")
    out.parent.mkdir(parents=True, exist_ok=True)
    for old in out.parent.glob(out.name + "*"):
        old.unlink()
    fleet = start_stub_fleet(2, out.parent / "stub-engine.log")
    result: dict[str, float] = {}
    try:
        port = free_port()
        config = out.parent / "gateway.yaml"
        config.write_text(
            f"health:\n  scrape_interval_s: {scrape_interval_s}\n"
            f"  metrics_stale_after_s: {10 * scrape_interval_s}\n" + config_extra
        )
        cmd = [
            "valgrind",
            "--tool=callgrind",
            f"--callgrind-out-file={out}",
            "--dump-instr=no",
            "--dump-line=yes",
            *_command(fleet.urls, policy, port, config),
        ]
        env = {"PYTHONPATH": str(source), "PYTHONHASHSEED": "0"}
        log = out.parent / "gateway.log"
        with ChildProcess(cmd, log, env=env, cwd=source).start() as proc:
            url = f"http://127.0.0.1:{port}"
            proc.wait_for_http(url + "/v1/models", timeout_s=300.0)
            if asyncio.run(send(port, warmup, connections)):
                raise RuntimeError("warm-up requests failed")
            if idle_s > 0:
                _control(proc.pid, "--zero")
                time.sleep(idle_s)
                idle = _total_ir(_dump(proc.pid, out))
                result["idle_ir_per_s"] = idle / idle_s
            _control(proc.pid, "--zero")
            t0 = time.monotonic()
            failed = asyncio.run(send(port, requests, connections))
            wall = time.monotonic() - t0
            dump = _dump(proc.pid, out)
            if failed:
                raise RuntimeError(f"{failed} of {requests} requests failed")
            total = _total_ir(dump)
            result["requests"] = requests
            result["ir_total"] = total
            result["ir_per_request"] = total / requests
            result["wall_s"] = wall
            if "idle_ir_per_s" in result:
                net = total - result["idle_ir_per_s"] * wall
                result["ir_per_request_net"] = net / requests
            result["dump"] = str(dump)  # type: ignore[assignment]
    finally:
        fleet.process.stop()
    return result


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m bench.overhead.instructions", description=__doc__.splitlines()[0]
    )
    p.add_argument(
        "--policy", default="prefix-aware", help="kvgate's policy, or floor / floor-asgi"
    )
    p.add_argument("--requests", type=int, default=1000, help="measured, half streaming")
    p.add_argument("--warmup", type=int, default=200, help="unmeasured requests first")
    p.add_argument("--connections", type=int, default=4)
    p.add_argument("--idle", type=float, default=0.0, help="seconds of idle counted apart")
    p.add_argument(
        "--scrape-interval", type=float, default=1.0, help="engine metrics scrape period (s)"
    )
    p.add_argument("--source", default=str(REPO_ROOT), help="source tree the gateway runs from")
    p.add_argument(
        "--config",
        default="",
        metavar="YAML",
        help="more of kvgate's config, e.g. 'admission: {enabled: false}' (what a part costs)",
    )
    p.add_argument("--out", default="out/bench/callgrind/callgrind.out")
    p.add_argument("--top", type=int, default=0, help="print the N costliest functions")
    a = p.parse_args(argv)
    out = Path(a.out).resolve()
    res = measure(
        policy=a.policy,
        requests=a.requests,
        warmup=a.warmup,
        connections=a.connections,
        idle_s=a.idle,
        out=out,
        scrape_interval_s=a.scrape_interval,
        config_extra=a.config + "\n" if a.config else "",
        source=Path(a.source).resolve(),
    )
    for key, value in res.items():
        print(f"{key}: {value:,.0f}" if isinstance(value, float | int) else f"{key}: {value}")
    if a.top:
        annotate = subprocess.run(
            ["callgrind_annotate", "--inclusive=yes", str(res["dump"])],
            check=True,
            capture_output=True,
            text=True,
        )
        print("\n".join(annotate.stdout.splitlines()[: a.top + 25]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
