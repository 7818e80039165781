"""`kvgate+tune:POLICY`: kvgate recording its traffic, with `kvgate tune` beside it.

The gateway runs as `kvgate:POLICY` does, plus `--config` (a `tuning:` section in mode
`shadow`, which never changes routing) and `--record` to a file in the log directory; the
tuner evaluates every `INTERVAL_S` the last `INTERVAL_S` of the recording, niced (`nice -n
10`), or with `idle` at the idle scheduling class (`chrt --idle 0`: it runs only on a core
nothing else wants). Its CPU seconds are the overhead run's `tuner_cpu_s` (per rate and in
all); they are not the router's. What the comparison with `kvgate:POLICY` measures is the
latency a tuner adds to the gateway by sharing its machine and writing the recording.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from pathlib import Path

import yaml

from sim.live.processes import ChildProcess, free_port, gateway_command, kvgate_command

INTERVAL_S = 5.0
TUNING = {
    "mode": "shadow",
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
    policy: str, urls: Sequence[str], logs: Path, idle: bool = False
) -> Iterator[tuple[ChildProcess, str, ChildProcess]]:
    """The recording gateway, its URL and the tuner process (see the module docstring)."""
    tag = f"{policy}-idle" if idle else policy
    config = write_config(logs / f"tuned-{tag}.yaml")
    record = logs / f"tuned-{tag}.jsonl"
    record.unlink(missing_ok=True)  # the recorder appends
    port = free_port()
    extra = ("--log-level", "warning", "--config", str(config), "--record", str(record))
    cmd = gateway_command(urls, policy, port=port, extra=extra)
    with ChildProcess(cmd, logs / f"tuned-{tag}.log").start() as gateway:
        url = f"http://127.0.0.1:{port}"
        gateway.wait_for_http(url + "/v1/models")
        tune = kvgate_command("tune", "--gateway", url, "--config", str(config))
        tune += ["--record", str(record)]
        log = logs / f"tuner-{tag}.log"
        below = ["chrt", "--idle", "0"] if idle else ["nice", "-n", "10"]
        with ChildProcess([*below, *tune], log).start() as tuner:
            yield gateway, url, tuner
