"""`kvgate serve --workers N`: the master that forks N gateway workers and keeps them running.

The master checks the command line and config, reserves the port (`gateway.workers.listen`),
creates the workers' private directory (mode 0700, removed at the end; `gateway.workers.siblings`)
and forks N workers, each building and serving its own gateway on its own socket (`run_one`). It
builds no gateway itself, so it forks before any thread or event loop exists.

- SIGTERM, SIGINT and SIGHUP go to every worker, which drains, stops or reloads as a lone
  gateway does (`gateway.lifecycle`); the master exits 0 once the last worker has.
- Workers run in process groups of their own (a terminal's Ctrl+C reaches them once, through
  the master) and die with it (PR_SET_PDEATHSIG) rather than hold the port as orphans.
- A worker that exits on its own is started again after a backoff (1 s, doubling to 30 s, back
  to 1 s after a minute of serving). One that exits before it ever served failed its start-up:
  the master stops the others and exits with its status (docs/decisions/0016-workers.md).
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import select
import shutil
import signal
import socket
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

from gateway.workers.context import WorkerContext

log = logging.getLogger(__name__)

_FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
_PR_SET_PDEATHSIG = 1
_SERVED_RESETS_BACKOFF_S = 60.0


@dataclass(slots=True)
class _Worker:
    index: int
    pid: int
    started_at: float
    served: bool = False


class Master:
    """Forks `count` workers running `run_one` and supervises them (module docstring)."""

    def __init__(
        self,
        count: int,
        run_one: Callable[[WorkerContext], int],
        *,
        label: str = "",
        close_in_workers: Sequence[socket.socket] = (),
        first_backoff_s: float = 1.0,
        max_backoff_s: float = 30.0,
    ) -> None:
        self.count = count
        self._run_one = run_one
        self._label = label
        self._close_in_workers = close_in_workers
        self._first_backoff_s = first_backoff_s
        self._max_backoff_s = max_backoff_s
        self._workers: dict[int, _Worker] = {}  # pid → worker
        self._restart_at: dict[int, float] = {}  # index → when to start it again
        self._backoff = dict.fromkeys(range(count), first_backoff_s)
        self._stopping = False
        self._status = 0
        self._all_served = False
        self._pid = os.getpid()
        self._run_dir = Path()
        self._ready_r = self._ready_w = -1

    def run(self) -> int:
        """Start the workers and supervise them until they are all gone; the exit status."""
        self._run_dir = Path(tempfile.mkdtemp(prefix="kvgate-workers-"))
        self._ready_r, self._ready_w = os.pipe()
        os.set_blocking(self._ready_r, False)
        previous = {sig: signal.signal(sig, self._on_signal) for sig in _FORWARDED}
        try:
            for i in range(self.count):
                self._spawn(i)
            while self._workers or (self._restart_at and not self._stopping):
                self._wait_ready(0.2)
                self._reap()
                self._restart_due()
            return self._status
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            os.close(self._ready_r)
            os.close(self._ready_w)
            shutil.rmtree(self._run_dir, ignore_errors=True)

    def _on_signal(self, sig: int, frame: FrameType | None) -> None:
        if sig != signal.SIGHUP:
            self._stopping = True
        for w in self._workers.values():
            with contextlib.suppress(ProcessLookupError):
                os.kill(w.pid, sig)

    def _spawn(self, index: int) -> None:
        pid = os.fork()
        if pid == 0:  # the worker: never returns
            code = 1
            try:
                code = self._worker(index)
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
            except BaseException:
                log.exception("worker %d failed", index)
            finally:
                logging.shutdown()
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        self._workers[pid] = _Worker(index, pid, time.monotonic())
        self._restart_at.pop(index, None)

    def _worker(self, index: int) -> int:
        os.setpgid(0, 0)
        _die_with_parent()
        if os.getppid() != self._pid:  # the master died before the line above
            return 1
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, signal.SIG_DFL)  # the server sets its own
        signal.signal(signal.SIGHUP, signal.SIG_IGN)  # until the gateway handles it
        os.close(self._ready_r)
        for s in self._close_in_workers:
            s.close()
        ctx = WorkerContext(index, self.count, self._run_dir, self._ready_w)
        return self._run_one(ctx)

    def _wait_ready(self, timeout_s: float) -> None:
        """Read the lines of workers that serve now (`WorkerContext.notify_started`)."""
        ready, _, _ = select.select([self._ready_r], [], [], timeout_s)
        if not ready:
            return
        with contextlib.suppress(BlockingIOError):
            for line in os.read(self._ready_r, 65536).split():
                self._served(int(line))

    def _served(self, index: int) -> None:
        for w in self._workers.values():
            if w.index == index:
                w.served = True
        served = [w for w in self._workers.values() if w.served]
        if not self._all_served and len(served) == self.count:
            self._all_served = True
            log.info("%d workers serving %s (pids %s)", self.count, self._label, self._pids())

    def _pids(self) -> str:
        return " ".join(str(p) for p in sorted(self._workers))

    def _reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            w = self._workers.pop(pid, None)
            if w is not None:
                self._wait_ready(0)  # a worker that served said so before it exited
                self._exited(w, os.waitstatus_to_exitcode(status))

    def _exited(self, w: _Worker, code: int) -> None:
        if self._stopping:
            return
        if not w.served:
            log.error(
                "worker %d (pid %d) exited with status %d before serving: stopping",
                w.index,
                w.pid,
                code,
            )
            self._status = code if code > 0 else 1
            self._stopping = True
            for other in self._workers.values():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(other.pid, signal.SIGINT)
            return
        lived = time.monotonic() - w.started_at
        if lived >= _SERVED_RESETS_BACKOFF_S:
            self._backoff[w.index] = self._first_backoff_s
        wait = self._backoff[w.index]
        self._backoff[w.index] = min(wait * 2, self._max_backoff_s)
        log.warning(
            "worker %d (pid %d) exited with status %d after %.0f s: starting it again in %g s",
            w.index,
            w.pid,
            code,
            lived,
            wait,
        )
        self._restart_at[w.index] = time.monotonic() + wait

    def _restart_due(self) -> None:
        if self._stopping:
            self._restart_at.clear()
            return
        now = time.monotonic()
        for index, at in list(self._restart_at.items()):
            if at <= now:
                self._spawn(index)


def _die_with_parent() -> None:
    """SIGKILL this process when its parent dies (Linux; elsewhere a no-op)."""
    if not sys.platform.startswith("linux"):
        return
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
