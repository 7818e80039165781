"""`kvgate+tune:POLICY`: kvgate recording its traffic, with `kvgate tune` beside it.

The gateway runs as `kvgate:POLICY` does, plus `--config` (a `tuning:` section in mode
`shadow`, which never changes routing) and `--record` to a file in the log directory; the
tuner evaluates every `INTERVAL_S` the last `INTERVAL_S` of the recording, niced (`nice -n
10`), or with `idle` at the idle scheduling class (`chrt --idle 0`: it runs only on a core
nothing else wants). Its CPU seconds are the overhead run's `tuner_cpu_s` (per rate and in
all); they are not the router's. What the comparison with `kvgate:POLICY` measures is the
latency a tuner adds to the gateway by sharing its machine and writing the recording.

Two controls split that: `kvgate+record:POLICY`, the same recording gateway alone (what
writing the recording adds), and `kvgate+burn:POLICY`, the recording gateway beside a
process that does nothing useful but spin on the CPU, niced as the tuner is, for `BURN_S` of
every `INTERVAL_S` (about what the tuner spends evaluating): what any process using that
much CPU on the same machine adds.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import yaml

from sim.live.processes import ChildProcess, free_port, gateway_command, kvgate_command

INTERVAL_S = 5.0
BURN_S = 1.0  # the tuner measured 3.6–4.8 CPU seconds per 20 s at these settings
# The burn control: spins BURN_S, sleeps the rest of each INTERVAL_S, until killed.
_BURN = (
    "import time\n"
    "while True:\n"
    "    start = time.monotonic()\n"
    "    while time.monotonic() - start < {busy}:\n"
    "        pass\n"
    "    time.sleep({rest})\n"
)
TUNING = {
    "mode": "shadow",
    "spawn": False,  # started here, niced or at the idle class, its CPU read by its pid
    "interval_s": INTERVAL_S,
    "window_s": INTERVAL_S,
    "min_requests": 20,
    "seeds": 2,
    "search": 2,
    "candidates": ["prefix-aware", "least-load"],
    "engine_profile": "demo",
}


def write_config(path: Path) -> Path:
    """The config both processes read: only the `tuning:` section (defaults elsewhere)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump({"tuning": TUNING}, sort_keys=False), encoding="utf-8")
    return path


@contextlib.contextmanager
def launch_tuned(
    policy: str, urls: Sequence[str], logs: Path, beside: str = "tune"
) -> Iterator[tuple[ChildProcess, str, ChildProcess | None]]:
    """The recording gateway, its URL and the process beside it (None for `record`):
    `beside` is `tune`, `tune+idle`, `burn` or `record` (see the module docstring)."""
    if beside not in ("tune", "tune+idle", "burn", "record"):
        raise ValueError(f"nothing known to run beside the gateway as {beside!r}")
    tag = policy if beside == "tune" else f"{policy}-{beside.replace('+', '-')}"
    config = write_config(logs / f"tuned-{tag}.yaml")
    record = logs / f"tuned-{tag}.jsonl"
    record.unlink(missing_ok=True)  # the recorder appends
    port = free_port()
    extra = ("--log-level", "warning", "--config", str(config), "--record", str(record))
    cmd = gateway_command(urls, policy, port=port, extra=extra)
    with ChildProcess(cmd, logs / f"tuned-{tag}.log").start() as gateway:
        url = f"http://127.0.0.1:{port}"
        gateway.wait_for_http(url + "/v1/models")
        if beside == "record":
            yield gateway, url, None
            return
        if beside == "burn":
            script = _BURN.format(busy=BURN_S, rest=INTERVAL_S - BURN_S)
            command = ["nice", "-n", "10", sys.executable, "-c", script]
        else:
            tune = kvgate_command("tune", "--gateway", url, "--config", str(config))
            tune += ["--record", str(record)]
            below = ["chrt", "--idle", "0"] if beside == "tune+idle" else ["nice", "-n", "10"]
            command = [*below, *tune]
        with ChildProcess(command, logs / f"beside-{tag}.log").start() as companion:
            yield gateway, url, companion
