"""Run wrk open-loop at a fixed rate and read its result line.

Why wrk: a Python client tops out near 800 requests/s on this machine, below what the proxies
under test sustain; wrk (Debian package `wrk`, C, one epoll thread) spends a few µs per
request. It is closed-loop by design, so `wrk_open_loop.lua` makes it open-loop: each wrk
thread keeps a schedule of send slots 1/rate apart, and whichever of the `connections` is
idle claims the next slot and sleeps until it (`delay()`; millisecond timer resolution, so
sends cluster on 1 ms ticks at high rates).

Coordinated omission: wrk times each request from when it is written, not from its slot.
While an idle connection exists, every request is written at its slot (±1 ms), so the two
agree. When all connections are busy a slot is written late; the script counts those
(`late`, `late_ms`) instead of hiding them, and a run with late sends is not counted as
sustained. Latency then understates what an open-loop client would see.
"""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

LUA = Path(__file__).with_name("wrk_open_loop.lua")
_MARK = "KVGATE_WRK "


@dataclass(frozen=True, slots=True)
class WrkResult:
    """One fixed-rate run: counts, errors and latency percentiles (seconds)."""

    offered_rps: float
    achieved_rps: float
    requests: int
    errors: int
    late: int
    late_ms_total: float
    p50_s: float
    p90_s: float
    p99_s: float
    p999_s: float
    mean_s: float
    max_s: float

    @property
    def sustained(self) -> bool:
        """The proxy kept up: ≥95 % of the offered rate, no errors, ≤1 % of sends late."""
        return (
            self.achieved_rps >= 0.95 * self.offered_rps
            and self.errors == 0
            and self.late <= 0.01 * max(1, self.requests)
        )


def ensure_wrk() -> str:
    """The wrk binary; installed with apt-get (logged) when missing."""
    path = shutil.which("wrk")
    if path:
        return path
    print("wrk not found: running `apt-get install -y wrk`", file=sys.stderr, flush=True)
    subprocess.run(["apt-get", "install", "-y", "-q", "wrk"], check=True, timeout=600)
    path = shutil.which("wrk")
    if path is None:
        raise RuntimeError("wrk is still missing after apt-get install")
    return path


def run_wrk(
    wrk: str,
    url: str,
    *,
    rate: float,
    duration_s: float,
    connections: int,
    model: str,
    stream_fraction: float,
    headers: dict[str, str] | None = None,
) -> WrkResult:
    """Offer `rate` requests/s to `url` for `duration_s` from one wrk thread, over at most
    `connections` connections: about one per 4 requests/s, so that none sits idle past a
    server's keep-alive timeout (uvicorn's is 5 s), whose closing races wrk's next send."""
    connections = min(connections, max(4, math.ceil(rate / 4)))
    cmd = [
        wrk, "-t1", f"-c{connections}", f"-d{duration_s:g}s", "--timeout", "5s",
        "-s", str(LUA), url, "--", f"{rate:g}", model, f"{stream_fraction:g}",
        *(f"{k}: {v}" for k, v in (headers or {}).items()),
    ]  # fmt: skip
    out = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=duration_s + 60)
    line = next((ln for ln in out.stdout.splitlines() if ln.startswith(_MARK)), None)
    if line is None:
        raise RuntimeError(f"wrk gave no result (rc {out.returncode}):\n{out.stdout}{out.stderr}")
    return parse_result(line[len(_MARK) :], rate)


def parse_result(text: str, rate: float) -> WrkResult:
    d = json.loads(text)
    errors = sum(v for k, v in d.items() if k.startswith("errors_"))
    us = 1e-6
    return WrkResult(
        offered_rps=rate,
        achieved_rps=d["requests"] / (d["duration_us"] * us),
        requests=d["requests"],
        errors=errors,
        late=d["late"],
        late_ms_total=d["late_ms"],
        p50_s=d["lat_p50_us"] * us,
        p90_s=d["lat_p90_us"] * us,
        p99_s=d["lat_p99_us"] * us,
        p999_s=d["lat_p999_us"] * us,
        mean_s=d["lat_mean_us"] * us,
        max_s=d["lat_max_us"] * us,
    )
