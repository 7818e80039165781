"""Child processes of live experiments: one wrapper, kvgate's own commands, a free port.

`ChildProcess` runs a command in its own session (so its own process group), its output in
a log file, and stops it by its pid: a signal to the group (SIGINT unless told otherwise),
SIGKILL to the group if the leader has not exited within the timeout, then SIGKILL to what
is left of the group (workers a server forked may outlive it). Readiness is a log line
(`wait_for_line`, for programs that print where they listen) or an HTTP answer
(`wait_for_http`). `start_emulator` (`start_pd_emulator`: a P/D fleet) and `start_gateway`
run `kvgate emulate` and `kvgate serve` with this interpreter (`python -m kvgate.cli`: a
child process, nothing of the gateway is imported here) on port 0 and read their URLs from
the log.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

import httpx

log = logging.getLogger(__name__)

HOST = "127.0.0.1"
_POLL_S = 0.05
_NOTE_EVERY_S = 10.0


def free_port(host: str = HOST) -> int:
    """A port that was free on `host` a moment ago.

    Racy by nature: another process may bind it before it is used. For programs that cannot
    bind port 0 and report the port they got (peer routers, vLLM), and for URLs where nothing
    should listen.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


class ChildProcess:
    """A command in its own process group with its output in `log_path`, stopped by its pid.

    `env` is added to this process's environment (a None value removes the variable); the
    child runs in `cwd` if given. Start it with `start()`; as a context manager it is stopped
    on exit: `with ChildProcess(cmd, log).start() as proc: proc.wait_for_http(url)`.
    """

    def __init__(
        self,
        command: Sequence[str],
        log_path: Path,
        *,
        env: Mapping[str, str | None] | None = None,
        cwd: Path | None = None,
        stop_signal: signal.Signals = signal.SIGINT,
        stop_timeout_s: float = 10.0,
    ) -> None:
        self.command = list(command)
        self.log_path = log_path
        self._env = dict(env or {})
        self._cwd = cwd
        self._stop_signal = stop_signal
        self._stop_timeout_s = stop_timeout_s
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        if self._proc is None:
            raise RuntimeError("not started")
        return self._proc.pid

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self) -> ChildProcess:
        if self._proc is not None:
            raise RuntimeError("already started")
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        for name, value in self._env.items():
            if value is None:
                env.pop(name, None)
            else:
                env[name] = value
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("wb") as out:
            self._proc = subprocess.Popen(
                self.command,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                cwd=self._cwd,
                start_new_session=True,
            )
        return self

    def wait_for_line(
        self, pattern: str, count: int = 1, timeout_s: float = 60.0
    ) -> list[re.Match[str]]:
        """Wait until `count` lines of the log match `pattern`; return the matches."""
        regex = re.compile(pattern)
        deadline = time.monotonic() + timeout_s
        while True:
            text = self.log_path.read_text(errors="replace")
            found = [m for line in text.splitlines() if (m := regex.search(line))]
            if len(found) >= count:
                return found[:count]
            self._check_alive()
            if time.monotonic() > deadline:
                raise TimeoutError(f"no {pattern!r} in {self.log_path} after {timeout_s} s")
            time.sleep(_POLL_S)

    def wait_for_http(
        self,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        timeout_s: float = 120.0,
        interval_s: float = 0.2,
    ) -> None:
        """Wait until GET `url` answers 200; log a note every 10 s of waiting."""
        started = time.monotonic()
        noted = started
        with httpx.Client(timeout=2.0, headers=dict(headers or {})) as client:
            while True:
                self._check_alive()
                with contextlib.suppress(httpx.TransportError):
                    if client.get(url).status_code == 200:
                        return
                now = time.monotonic()
                if now - started > timeout_s:
                    tail = self.log_tail()
                    raise TimeoutError(f"{url} not ready after {timeout_s:.0f} s:\n{tail}")
                if now - noted >= _NOTE_EVERY_S:
                    log.info("waiting for %s (%.0f s)", url, now - started)
                    noted = now
                time.sleep(interval_s)

    def _check_alive(self) -> None:
        if self._proc is not None and self._proc.poll() is not None:
            raise RuntimeError(
                f"{' '.join(self.command[:4])} exited with code {self._proc.returncode}:\n"
                + self.log_tail()
            )

    def log_tail(self, chars: int = 3000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def stop(self) -> None:
        """Signal the group, SIGKILL it if the leader lingers, then end what is left of it."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.poll() is None:
            _signal_group(proc.pid, self._stop_signal)
            try:
                proc.wait(timeout=self._stop_timeout_s)
            except subprocess.TimeoutExpired:
                _signal_group(proc.pid, signal.SIGKILL)
                proc.wait()
        _signal_group(proc.pid, signal.SIGKILL)

    def __enter__(self) -> ChildProcess:
        return self

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, sig)


def kvgate_command(*args: str) -> list[str]:
    """`kvgate ARGS` as run by this interpreter."""
    return [sys.executable, "-m", "kvgate.cli", *args]


def gateway_command(
    backends: Sequence[str],
    policy: str,
    *,
    port: int = 0,
    extra: Sequence[str] = (),
    python: str = sys.executable,
) -> list[str]:
    """`kvgate serve` on 127.0.0.1:`port` in front of `backends` with routing `policy`."""
    cmd = [python, "-m", "kvgate.cli", "serve", "--host", HOST, "--port", str(port)]
    cmd += ["--policy", policy, *extra]
    for url in backends:
        cmd += ["--backend", url]
    return cmd


def start_emulator(
    replicas: int,
    profile: str,
    model: str,
    log_path: Path,
    *,
    speedup: float = 1.0,
    extra: Sequence[str] = (),
) -> tuple[ChildProcess, list[str]]:
    """`kvgate emulate` with `replicas` replicas on free ports; the process and their URLs."""
    args = ["emulate", "--replicas", str(replicas), "--port", "0", "--profile", profile]
    args += ["--model", model, "--speedup", str(speedup), *extra]
    child = ChildProcess(kvgate_command(*args), log_path).start()
    try:
        urls = [m.group(1) for m in child.wait_for_line(r"^replica \d+: (http://\S+)", replicas)]
    except BaseException:
        child.stop()
        raise
    return child, urls


@dataclass(frozen=True, slots=True)
class PDFleet:
    """A P/D fleet's addresses: each prefill replica's URL and SGLang bootstrap port (None
    under vLLM's protocol), each decode replica's URL."""

    prefill: list[tuple[str, int | None]]
    decode: list[str]


def start_pd_emulator(
    prefill: int,
    decode: int,
    protocol: str,
    log_path: Path,
    *,
    profile: str = "demo",
    model: str = "kvgate-demo",
    speedup: float = 1.0,
    extra: Sequence[str] = (),
) -> tuple[ChildProcess, PDFleet]:
    """`kvgate emulate --prefill N --decode M --pd-protocol P` on free ports; the process
    and its fleet's addresses, read from the log."""
    args = ["emulate", "--prefill", str(prefill), "--decode", str(decode), "--port", "0"]
    args += ["--pd-protocol", protocol, "--profile", profile, "--model", model]
    args += ["--speedup", str(speedup), *extra]
    child = ChildProcess(kvgate_command(*args), log_path).start()
    try:
        found = child.wait_for_line(
            r"^replica \d+ \((prefill|decode)\): (http://\S+)", prefill + decode
        )
        bootstraps = []
        if protocol == "sglang" and prefill:
            lines = child.wait_for_line(r"^replica \d+ \(prefill\) bootstrap: (\d+)", prefill)
            bootstraps = [int(m.group(1)) for m in lines]
    except BaseException:
        child.stop()
        raise
    p_urls = [m.group(2) for m in found if m.group(1) == "prefill"]
    d_urls = [m.group(2) for m in found if m.group(1) == "decode"]
    ports: list[int | None] = [*bootstraps] if bootstraps else [None] * len(p_urls)
    return child, PDFleet(list(zip(p_urls, ports, strict=True)), d_urls)


def start_redis(log_path: Path, port: int = 0) -> tuple[ChildProcess, str]:
    """A fresh `redis-server` on `port` (0: a free one), no persistence; the process and its
    URL, once it accepts connections (for runs whose gateways share state: `state: redis`)."""
    port = port or free_port()
    command = ["redis-server", "--port", str(port), "--bind", HOST]
    command += ["--save", "", "--appendonly", "no"]
    child = ChildProcess(command, log_path).start()
    try:
        child.wait_for_line(r"Ready to accept connections")
    except BaseException:
        child.stop()
        raise
    return child, f"redis://{HOST}:{port}/0"


def wait_for_workers(url: str, count: int, timeout_s: float = 60.0) -> None:
    """Until `count` distinct workers of a `kvgate serve --workers N` at `url` answer
    `/ready` with 200 (a new connection each time: the kernel spreads them over the workers,
    and one that is not listening yet gets none)."""
    seen: set[int] = set()
    deadline = time.monotonic() + timeout_s
    while len(seen) < count:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{url}: {len(seen)} of {count} workers ready after {timeout_s} s")
        with (
            contextlib.suppress(httpx.HTTPError, KeyError, ValueError),
            httpx.Client(timeout=2.0) as client,
        ):
            r = client.get(url + "/ready")
            if r.status_code == 200:
                seen.add(int(r.json()["worker"]["index"]))
        time.sleep(0.02)


def start_gateway(
    backends: Sequence[str], policy: str, log_path: Path, extra: Sequence[str] = ()
) -> tuple[ChildProcess, str]:
    """`kvgate serve` on a free port; the process and its URL, once it answers /ready."""
    child = ChildProcess(gateway_command(backends, policy, extra=extra), log_path).start()
    try:
        [m] = child.wait_for_line(r"Uvicorn running on (http://[0-9.:]+)")
        url = m.group(1)
        child.wait_for_http(url + "/ready", timeout_s=30.0, interval_s=_POLL_S)
    except BaseException:
        child.stop()
        raise
    return child, url
