"""Start kvgate's own commands (emulator, gateway) as child processes, and stop them by pid.

Used by the demo and the benchmarks: each child writes its output to a log file, which is
polled for the line that says where it listens.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType


class ChildProcess:
    """A `kvgate …` child process with its output in `log_path`; a context manager."""

    def __init__(self, args: Sequence[str], log_path: Path) -> None:
        self.args = [sys.executable, "-m", "gateway.cli", *args]
        self.log_path = log_path
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self) -> ChildProcess:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("wb") as log:
            self._proc = subprocess.Popen(
                self.args,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
        return self

    def wait_for(self, pattern: str, count: int = 1, timeout: float = 60.0) -> list[re.Match[str]]:
        """Wait until `count` log lines match `pattern`; return the matches."""
        regex = re.compile(pattern)
        deadline = time.monotonic() + timeout
        while True:
            text = self.log_path.read_text(errors="replace")
            found = [m for line in text.splitlines() if (m := regex.search(line))]
            if len(found) >= count:
                return found[:count]
            if self._proc is not None and self._proc.poll() is not None:
                raise RuntimeError(f"{' '.join(self.args[2:4])} exited:\n{text[-2000:]}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"no {pattern!r} in {self.log_path} after {timeout} s")
            time.sleep(0.05)

    def stop(self, timeout: float = 10.0) -> None:
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def __enter__(self) -> ChildProcess:
        return self.start()

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def start_emulator(
    replicas: int,
    profile: str,
    model: str,
    log: Path,
    *,
    speedup: float = 1.0,
    extra: Sequence[str] = (),
) -> tuple[ChildProcess, list[str]]:
    child = ChildProcess(
        [
            "emulate",
            "--replicas",
            str(replicas),
            "--port",
            "0",
            "--profile",
            profile,
            "--model",
            model,
            "--speedup",
            str(speedup),
            *extra,
        ],
        log,
    ).start()
    try:
        urls = [m.group(1) for m in child.wait_for(r"^replica \d+: (http://\S+)", replicas)]
    except BaseException:
        child.stop()
        raise
    return child, urls


def start_gateway(
    backends: Sequence[str], policy: str, log: Path, extra: Sequence[str] = ()
) -> tuple[ChildProcess, str]:
    args = ["serve", "--port", "0", "--policy", policy, *extra]
    for url in backends:
        args += ["--backend", url]
    child = ChildProcess(args, log).start()
    try:
        [m] = child.wait_for(r"Uvicorn running on (http://[0-9.:]+)")
    except BaseException:
        child.stop()
        raise
    return child, m.group(1)
