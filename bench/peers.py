"""Peer routers for side-by-side benchmarks: install each into its own venv, launch, stop.

Peers: `sglang-router` (SGLang's model gateway), `vllm-router` and `litellm` (its proxy),
each installed on demand from PyPI into `.venv-peers/<name>/`; and kvgate itself, launched
from the running interpreter, so a harness treats every router alike. Each router runs as
a `sim.live.processes.ChildProcess` (its own process group) on 127.0.0.1, logs to a file,
is waited for until it answers `GET /v1/models`, and is stopped by its pid. Exact versions
and command lines are exposed so that a report can carry them; `pd_peer_command` gives
sglang-router's and vllm-router's own P/D modes.
"""

from __future__ import annotations

import contextlib
import json
import logging
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from bench import REPO_ROOT
from sim.live.experiment import Router, RouterFactory, RouterSite
from sim.live.processes import ChildProcess, free_port, gateway_command

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
        # LiteLLM refuses to start without one; clients send it (`PEER_HEADERS`).
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
        return gateway_command(urls, policy, port=port, extra=("--log-level", "warning"), python=py)
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


# Each peer's P/D mode: the protocol it speaks to engines (`kvgate emulate --pd-protocol`).
PD_PROTOCOL = {"sglang-router": "sglang", "vllm-router": "vllm"}


def pd_peer_command(
    install: PeerInstall,
    *,
    port: int,
    prefill: Sequence[tuple[str, int | None]],
    decode: Sequence[str],
    policy: str = "default",
    metrics_port: int = 0,
) -> list[str]:
    """The command line that starts `install`'s own P/D mode on 127.0.0.1:`port`: `prefill`
    (URL, SGLang bootstrap port or None) and `decode` URLs, as `PD_PROTOCOL` engines."""
    if install.name not in PD_PROTOCOL:
        raise ValueError(
            f"{install.name!r} has no P/D mode here; those that do: {list(PD_PROTOCOL)}"
        )
    py = str(install.python)
    mode = "--pd-disaggregation" if install.name == "sglang-router" else "--vllm-pd-disaggregation"
    module = (
        "sglang_router.launch_router"
        if install.name == "sglang-router"
        else "vllm_router.launch_router"
    )
    cmd = [py, "-m", module, "--host", "127.0.0.1", "--port", str(port), mode]
    for url, bootstrap in prefill:
        cmd += ["--prefill", url, *([str(bootstrap)] if bootstrap is not None else [])]
    for url in decode:
        cmd += ["--decode", url]
    if policy != "default":
        cmd += ["--policy", policy]
    level = "warn" if install.name == "sglang-router" else "warning"
    cmd += ["--log-level", level, "--prometheus-host", "127.0.0.1"]
    return [*cmd, "--prometheus-port", str(metrics_port)]


# LiteLLM would fetch its model price map from the internet at start and log every call.
PEER_ENV = {
    "litellm": {
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "LITELLM_LOG": "ERROR",
        "LITELLM_TELEMETRY": "False",
    },
}


def start_peer(
    install: PeerInstall,
    *,
    worker_urls: Sequence[str],
    model: str,
    policy: str,
    out_dir: Path,
    log_name: str | None = None,
    port: int = 0,
    ready_timeout: float = 120.0,
    extra_args: Sequence[str] = (),
) -> tuple[ChildProcess, str]:
    """Start `install` in front of `worker_urls` and wait until it answers `GET /v1/models`;
    return the process (stop it, or use it as a context manager) and its URL. It runs in
    `out_dir` and logs to `out_dir/<log_name>.log` (default `<name>-<policy>`); `extra_args`
    are appended to its command line."""
    out_dir = out_dir.resolve()  # the peer runs in out_dir: relative paths would break
    out_dir.mkdir(parents=True, exist_ok=True)
    port = port or free_port()
    tag = log_name or f"{install.name}-{policy}"
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
    url = f"http://127.0.0.1:{port}"
    env = PEER_ENV.get(install.name, {})
    proc = ChildProcess([*command, *extra_args], out_dir / f"{tag}.log", env=env, cwd=out_dir)
    with contextlib.ExitStack() as on_failure:
        on_failure.callback(proc.stop)
        proc.start().wait_for_http(
            url + "/v1/models", headers=PEER_HEADERS.get(install.name), timeout_s=ready_timeout
        )
        on_failure.pop_all()
    return proc, url


def peer_router(install: PeerInstall, policy: str, extra_args: Sequence[str] = ()) -> RouterFactory:
    """`install` with `policy` as a router for `sim.live.experiment.run_experiment`."""

    @contextlib.contextmanager
    def start(site: RouterSite) -> Iterator[Router]:
        proc, url = start_peer(
            install,
            worker_urls=site.replica_urls,
            model=site.model,
            policy=policy,
            out_dir=site.log_dir,
            log_name=f"{site.tag}-router",
            extra_args=extra_args,
        )
        with proc:
            yield Router(url, PEER_HEADERS.get(install.name, {}), tuple(proc.command))

    return start
