"""One vLLM OpenAI server as a child process: start, wait for /health, always stop by pid.

The server runs in its own session (process group), so stopping it also stops the engine-core
process it spawns: SIGTERM to the group, then SIGKILL if it has not exited within 20 s.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

import httpx

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ServerSettings:
    block_size: int = 32
    max_num_seqs: int = 64
    max_num_batched_tokens: int = 4096
    max_model_len: int = 4096
    kv_cache_gib: int = 1

    def args(self, model_dir: Path, port: int) -> list[str]:
        return [
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            str(model_dir),
            "--load-format",
            "dummy",
            "--enable-prefix-caching",
            "--enable-prompt-tokens-details",
            "--block-size",
            str(self.block_size),
            "--max-model-len",
            str(self.max_model_len),
            "--max-num-seqs",
            str(self.max_num_seqs),
            "--max-num-batched-tokens",
            str(self.max_num_batched_tokens),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--disable-uvicorn-access-log",
        ]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class VllmServer:
    """`with VllmServer(...) as server:` — started and healthy inside, stopped after."""

    def __init__(
        self,
        python: Path,
        model_dir: Path,
        settings: ServerSettings,
        log_path: Path,
        niceness: int = 0,
    ) -> None:
        self.python = python
        self.niceness = niceness
        self.model_dir = model_dir
        self.settings = settings
        self.log_path = log_path
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> VllmServer:
        try:
            self.start()
            self.wait_healthy()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self) -> None:
        env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": str(self.settings.kv_cache_gib)}
        env.pop("VIRTUAL_ENV", None)
        cmd = [str(self.python), *self.settings.args(self.model_dir, self.port)]
        if self.niceness:
            # Children (the engine core) inherit it: other work on the machine yields to vLLM.
            cmd = ["nice", "-n", str(self.niceness), *cmd]
        log.info("starting vLLM on port %d (log: %s)", self.port, self.log_path)
        with self.log_path.open("wb") as out:
            self._proc = subprocess.Popen(
                cmd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )

    def wait_healthy(self, timeout_s: float = 300.0) -> None:
        assert self._proc is not None
        started = time.monotonic()
        last_note = started
        while True:
            if self._proc.poll() is not None:
                raise RuntimeError(
                    f"vLLM exited with code {self._proc.returncode} during start-up:\n"
                    + self.log_tail()
                )
            try:
                if httpx.get(f"{self.url}/health", timeout=2.0).status_code == 200:
                    log.info("vLLM healthy after %.0f s", time.monotonic() - started)
                    return
            except httpx.TransportError:
                pass
            now = time.monotonic()
            if now - started > timeout_s:
                raise TimeoutError(f"vLLM not healthy after {timeout_s:.0f} s:\n{self.log_tail()}")
            if now - last_note >= 10:
                log.info("waiting for vLLM to start (%.0f s)", now - started)
                last_note = now
            time.sleep(0.5)

    def is_running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.poll() is None:
            log.info("stopping vLLM (pid %d)", proc.pid)
            _signal_group(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                _signal_group(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        # The engine core may outlive the API server by a moment; end what is left of the group.
        _signal_group(proc.pid, signal.SIGKILL)

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, sig)
