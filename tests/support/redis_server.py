"""A real `redis-server` for the shared-state tests: started on a free 127.0.0.1 port with
persistence off, stopped (or killed, to play an outage) by its pid, and restartable on the
same port so a gateway's reconnection can be watched."""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import time


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class RedisServer:
    """One redis-server process; `start` again after `kill` or `stop` reuses the port."""

    def __init__(self, port: int | None = None) -> None:
        self.binary = shutil.which("redis-server")
        if self.binary is None:
            raise FileNotFoundError("redis-server is not installed (apt-get install redis-server)")
        self.port = port or free_port()
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def start(self, within: float = 10.0) -> RedisServer:
        argv = [self.binary or "redis-server", "--port", str(self.port), "--bind", "127.0.0.1"]
        argv += ["--save", "", "--appendonly", "no", "--loglevel", "warning"]
        self._proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + within
        while not self.answers():
            if self._proc.poll() is not None:
                err = self._proc.stderr.read().decode() if self._proc.stderr else ""
                raise RuntimeError(f"redis-server exited {self._proc.returncode}: {err}")
            if time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(f"redis-server not answering on {self.port} after {within} s")
            time.sleep(0.02)
        return self

    def answers(self) -> bool:
        """Whether a PING on the port gets PONG."""
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as s:
                s.sendall(b"PING\r\n")
                return s.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def command(self, *args: str) -> bytes:
        """One command over a raw socket (inline RESP), the raw reply: for measurements."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=5) as s:
            parts = [f"${len(a.encode())}\r\n{a}\r\n" for a in args]
            s.sendall(f"*{len(args)}\r\n{''.join(parts)}".encode())
            return s.recv(1 << 16)

    def pause(self) -> None:
        """SIGSTOP: Redis accepts connections but answers nothing (a slow Redis, at worst)."""
        if self._proc is not None:
            self._proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        if self._proc is not None:
            self._proc.send_signal(signal.SIGCONT)

    def kill(self) -> None:
        """SIGKILL: an outage, as a crash looks to its clients."""
        self._end(kill=True)

    def stop(self) -> None:
        self._end(kill=False)

    def _end(self, *, kill: bool) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.poll() is None:
            proc.send_signal(signal.SIGCONT)  # a paused server cannot act on SIGTERM
            proc.kill() if kill else proc.terminate()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
        if proc.stderr is not None:
            proc.stderr.close()
