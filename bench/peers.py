"""Peer routers for side-by-side benchmarks: install each into its own venv, launch, stop.

Peers: `sglang-router` (SGLang's model gateway), `vllm-router` and `litellm` (its proxy),
each installed on demand from PyPI into `.venv-peers/<name>/`; and kvgate itself, launched
from the running interpreter, so a harness treats every router alike. Each router runs as
its own process group on 127.0.0.1, logs to a file, is waited for until it answers
`GET /v1/models`, and is stopped by its pid. Exact versions and command lines are exposed so
that a report can carry them.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from types import TracebackType

import httpx

from bench import REPO_ROOT

log = logging.getLogger(__name__)

PEERS_ROOT = REPO_ROOT / ".venv-peers"
KVGATE = "kvgate"
# name → (pip requirement, distribution whose version is reported)
PIP_PEERS: dict[str, tuple[str, str]] = {
    "sglang-router": ("sglang-router", "sglang-router"),
    "vllm-router": ("vllm-router", "vllm-router"),
    "litellm": ("litellm[proxy]", "litellm"),
}
PEERS = (KVGATE, *PIP_PEERS)
# Each peer's policy when the caller asks for "default" (what a user gets without a flag).
DEFAULT_POLICY = {
    KVGATE: "prefix-aware",
    "sglang-router": "cache_aware",
    # vllm-router 0.1.17's default; its kv_aware needs the engines' ZMQ KV events.
    "vllm-router": "cache_aware",
    "litellm": "simple-shuffle",
}

LITELLM_KEY = "sk-kvgate-bench"  # a local benchmark's key, not a secret
# Headers a client must send to each peer.
PEER_HEADERS = {"litellm": {"authorization": f"Bearer {LITELLM_KEY}"}}


@dataclass(frozen=True, slots=True)
class PeerInstall:
    """An installed router: the interpreter that runs it and its exact version."""

    name: str
    python: Path
    version: str


def ensure_peer(name: str, root: Path = PEERS_ROOT) -> PeerInstall:
    """Install `name` into `root/<name>/` unless a finished install is there."""
    if name == KVGATE:
        return PeerInstall(KVGATE, Path(sys.executable), metadata.version("kvgate"))
    if name not in PIP_PEERS:
        raise ValueError(f"unknown peer {name!r}; known: {', '.join(PEERS)}")
    requirement, dist = PIP_PEERS[name]
    venv = root / name
    python = venv / "bin" / "python"
    stamp = venv / ".installed"
    if not stamp.exists():
        if venv.exists():
            shutil.rmtree(venv)  # an unfinished install
        started = time.monotonic()
        print(f"installing {requirement} into {venv} ...", file=sys.stderr, flush=True)
        _run([sys.executable, "-m", "venv", str(venv)])
        pip = [str(python), "-m", "pip", "--disable-pip-version-check", "--quiet"]
        _run([*pip, "install", "--upgrade", "pip"])
        _run([*pip, "install", requirement])
        stamp.touch()
        print(f"  {name} installed in {time.monotonic() - started:.0f} s", file=sys.stderr)
    code = f"import importlib.metadata as m; print(m.version({dist!r}))"
    out = subprocess.run([str(python), "-c", code], check=True, capture_output=True, text=True)
    return PeerInstall(name, python, out.stdout.strip())


def _run(cmd: list[str]) -> None:
    log.info("$ %s", " ".join(cmd))
    subprocess.run(cmd, check=True, timeout=1800)


def litellm_config(worker_urls: Sequence[str], model: str, policy: str) -> str:
    """LiteLLM proxy config: one `model_list` entry per replica under one public name.

    Written as JSON, which is valid YAML, so no YAML library is needed here.
    """
    config = {
        "model_list": [
            {
                "model_name": model,
                "litellm_params": {
                    "model": f"openai/{model}",
                    "api_base": f"{url.rstrip('/')}/v1",
                    "api_key": "none",
                },
            }
            for url in worker_urls
        ],
        "router_settings": {"routing_strategy": policy},
        "litellm_settings": {"set_verbose": False, "request_timeout": 600},
        # LiteLLM refuses to start without one; clients send it (see `PeerProcess.headers`).
        "general_settings": {"master_key": LITELLM_KEY},
    }
    return json.dumps(config, indent=2) + "\n"


def peer_command(
    install: PeerInstall,
    *,
    port: int,
    worker_urls: Sequence[str],
    model: str,
    policy: str,
    metrics_port: int = 0,
    config_path: Path | None = None,
) -> list[str]:
    """The exact command line that starts `install` on 127.0.0.1:`port` in front of
    `worker_urls`. LiteLLM needs `config_path` (see `litellm_config`); SGLang's router
    gets its own Prometheus port (`metrics_port`), since it binds 0.0.0.0:29000 otherwise."""
    py, urls = str(install.python), list(worker_urls)
    policy = DEFAULT_POLICY[install.name] if policy == "default" else policy
    if install.name == KVGATE:
        cmd = [py, "-m", "gateway.cli", "serve", "--host", "127.0.0.1", "--port", str(port)]
        cmd += ["--policy", policy, "--log-level", "warning"]
        for url in urls:
            cmd += ["--backend", url]
        return cmd
    if install.name == "sglang-router":
        return [
            *(py, "-m", "sglang_router.launch_router", "--host", "127.0.0.1", "--port", str(port)),
            *("--worker-urls", *urls, "--policy", policy, "--log-level", "warn"),
            *("--prometheus-host", "127.0.0.1", "--prometheus-port", str(metrics_port)),
        ]
    if install.name == "vllm-router":
        return [
            *(py, "-m", "vllm_router.launch_router", "--host", "127.0.0.1", "--port", str(port)),
            *("--worker-urls", *urls, "--policy", policy, "--log-level", "warning"),
            *("--prometheus-host", "127.0.0.1", "--prometheus-port", str(metrics_port)),
        ]
    if install.name == "litellm":
        if config_path is None:
            raise ValueError("litellm needs config_path")
        litellm = str(install.python.parent / "litellm")
        return [litellm, "--config", str(config_path), "--host", "127.0.0.1", "--port", str(port)]
    raise ValueError(f"unknown peer {install.name!r}")


# LiteLLM would fetch its model price map from the internet at start and log every call.
PEER_ENV = {
    "litellm": {
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "LITELLM_LOG": "ERROR",
        "LITELLM_TELEMETRY": "False",
    },
}


def free_port() -> int:
    """A port free right now on 127.0.0.1 (peers that cannot bind port 0 get one of these)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class PeerProcess:
    """A running router in its own process group; a context manager that stops it by pid.

    `url` is where it serves the OpenAI API, `pid` its process id (for CPU/RSS accounting),
    `command` the exact command line, `log_path` its output, `headers` what every request
    to it must carry.
    """

    def __init__(
        self,
        command: list[str],
        url: str,
        log_path: Path,
        env: dict[str, str],
        headers: dict[str, str],
    ) -> None:
        self.command = command
        self.url = url
        self.log_path = log_path
        self.headers = headers
        self._env = env
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        if self._proc is None:
            raise RuntimeError("not started")
        return self._proc.pid

    def start(self, ready_timeout: float = 120.0) -> PeerProcess:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as out:
            self._proc = subprocess.Popen(
                self.command,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**os.environ, "PYTHONUNBUFFERED": "1", **self._env},
                cwd=self.log_path.parent,
                start_new_session=True,
            )
        try:
            self._wait_ready(ready_timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        with httpx.Client(timeout=2.0, headers=self.headers) as client:
            while True:
                if self._proc is not None and self._proc.poll() is not None:
                    tail = self.log_path.read_text(errors="replace")[-3000:]
                    raise RuntimeError(f"{self.command[:3]} exited:\n{tail}")
                try:
                    if client.get(self.url + "/v1/models").status_code == 200:
                        return
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{self.url} not ready after {timeout} s")
                time.sleep(0.2)

    def stop(self, timeout: float = 10.0) -> None:
        """SIGINT to the process group, SIGKILL if it lingers (only our own group)."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGINT)
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        # Workers a router forked may outlive its leader; they share its group id.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)

    def __enter__(self) -> PeerProcess:
        return self

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def start_peer(
    install: PeerInstall,
    *,
    worker_urls: Sequence[str],
    model: str,
    policy: str,
    out_dir: Path,
    port: int = 0,
    ready_timeout: float = 120.0,
    extra_args: Sequence[str] = (),
) -> PeerProcess:
    """Start `install` in front of `worker_urls` and wait until it answers; logs go to
    `out_dir/<name>-<policy>.log`; `extra_args` are appended to its command line. Use as
    `with start_peer(...) as peer:`."""
    out_dir = out_dir.resolve()  # the peer runs in out_dir: relative paths would break
    out_dir.mkdir(parents=True, exist_ok=True)
    port = port or free_port()
    tag = f"{install.name}-{policy}"
    config_path = None
    if install.name == "litellm":
        config_path = out_dir / f"{tag}.yaml"
        strategy = DEFAULT_POLICY["litellm"] if policy == "default" else policy
        config_path.write_text(litellm_config(worker_urls, model, strategy))
    command = peer_command(
        install,
        port=port,
        worker_urls=worker_urls,
        model=model,
        policy=policy,
        metrics_port=free_port(),
        config_path=config_path,
    )
    proc = PeerProcess(
        [*command, *extra_args],
        f"http://127.0.0.1:{port}",
        out_dir / f"{tag}.log",
        PEER_ENV.get(install.name, {}),
        PEER_HEADERS.get(install.name, {}),
    )
    return proc.start(ready_timeout)
