"""The overhead bench's stub replicas as one child process (`python -m bench.overhead.engine`),
started and known by their URLs; every bench that measures a router in front of them uses it."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from bench import REPO_ROOT
from sim.live.processes import ChildProcess

MODEL = "bench"  # the model name the stubs serve and every request names

# The floors beside the routers: a relay on bare protocols, and one on kvgate's own server and
# upstream client with none of its work (`--targets floor,floor-asgi`).
FLOORS = {"floor": "bench.overhead.floor", "floor-asgi": "bench.overhead.asgi_floor"}


@dataclass(frozen=True, slots=True)
class StubFleet:
    """The stub replicas, all in one child process."""

    process: ChildProcess
    urls: tuple[str, ...]


def start_stub_fleet(replicas: int, log_path: Path) -> StubFleet:
    """`python -m bench.overhead.engine` (bench/ on its path, as it is not installed)."""
    cmd = [sys.executable, "-m", "bench.overhead.engine", "--replicas", str(replicas)]
    cmd += ["--model", MODEL]
    process = ChildProcess(cmd, log_path, env={"PYTHONPATH": str(REPO_ROOT)}).start()
    try:
        found = process.wait_for_line(r"^replica \d+: (http://\S+)", replicas, timeout_s=30.0)
    except BaseException:
        process.stop()
        raise
    return StubFleet(process, tuple(m.group(1) for m in found))
