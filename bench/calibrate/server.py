"""One vLLM OpenAI server as a child process: start, wait for /health, always stop by pid.

`ServerSettings` is its command line and environment, KV-cache events (`KvEventsPublisher`:
vLLM's ZMQ publisher on `ipc://` sockets, `ipc_publisher`), LoRA adapters and a KV connector
(`NIXL_CONNECTOR`, for prefill/decode disaggregation) included. A
`sim.live.processes.ChildProcess`: the server runs in its own process group, so stopping
it also stops the engine-core process it spawns: SIGTERM to the group, then SIGKILL if it
has not exited within 20 s.
"""

from __future__ import annotations

import json
import logging
import signal
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

from sim.live.processes import ChildProcess, free_port

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class KvEventsPublisher:
    """vLLM's KV-cache event publisher (`--kv-events-config`): a PUB socket on `endpoint`, a
    ROUTER answering replay requests on `replay_endpoint` from its last `buffer_steps`
    batches. vLLM binds (rather than connects) only `tcp://*:P` and `ipc://` endpoints: on
    loopback use `ipc://` (`ipc_publisher`)."""

    endpoint: str
    replay_endpoint: str | None = None
    topic: str = "kv-events"
    buffer_steps: int = 10_000

    def config_json(self) -> str:
        config: dict[str, object] = {
            "enable_kv_cache_events": True,
            "publisher": "zmq",
            "endpoint": self.endpoint,
            "topic": self.topic,
            "buffer_steps": self.buffer_steps,
        }
        if self.replay_endpoint is not None:
            config["replay_endpoint"] = self.replay_endpoint
        return json.dumps(config)


# vLLM's NixlConnector in both roles (one server can prefill for others and decode), its
# buffers in CPU memory: prefill/decode disaggregation on vLLM's CPU build.
NIXL_CONNECTOR = json.dumps(
    {"kv_connector": "NixlConnector", "kv_role": "kv_both", "kv_buffer_device": "cpu"}
)


def ipc_publisher(directory: Path, name: str = "kv", topic: str = "kv-events") -> KvEventsPublisher:
    """A publisher on `ipc://DIRECTORY/NAME.pub`, replaying on `ipc://DIRECTORY/NAME.replay`
    (keep DIRECTORY short: a socket path holds at most ~100 bytes)."""
    directory.mkdir(parents=True, exist_ok=True)
    base = directory.resolve() / name
    return KvEventsPublisher(f"ipc://{base}.pub", f"ipc://{base}.replay", topic)


@dataclass(frozen=True, slots=True)
class ServerSettings:
    block_size: int = 32
    max_num_seqs: int = 64
    max_num_batched_tokens: int = 4096
    max_model_len: int = 4096
    kv_cache_gib: int = 1
    # KV blocks instead of what `kv_cache_gib` holds (vLLM's `--num-gpu-blocks-override`).
    num_blocks: int | None = None
    served_model_name: str | None = None
    # VLLM_SERVER_DEV_MODE=1: enables development endpoints such as `/reset_prefix_cache`.
    dev_mode: bool = False
    # VLLM_CPU_OMP_THREADS_BIND, e.g. "1": the engine's compute threads on these cores
    # (vLLM's "auto" puts every server on the same cores).
    cpu_bind: str | None = None
    # `--kv-events-config`: publish KV-cache events (None: no events).
    kv_events: KvEventsPublisher | None = None
    # `--enable-lora --lora-modules NAME=DIR ...` ((name, adapter directory) pairs; no LoRA
    # when empty), at most `max_loras` adapters in a batch, of rank up to `max_lora_rank`.
    lora_modules: tuple[tuple[str, str], ...] = ()
    max_loras: int = 2
    max_lora_rank: int = 8
    # `--load-format`: "dummy" draws random weights at start-up; "auto" reads the model's files.
    load_format: str = "dummy"
    # `--kv-transfer-config` (a KV connector, e.g. `NIXL_CONNECTOR`); None: none.
    kv_transfer_config: str | None = None
    # VLLM_NIXL_SIDE_CHANNEL_PORT: where NixlConnector's handshake listens (vLLM's default
    # 5600 is one port for every server on the machine).
    nixl_side_channel_port: int | None = None
    # `--data-parallel-size`: ranks behind the one API server (vLLM's engine cores).
    data_parallel_size: int = 1

    def env(self) -> dict[str, str | None]:
        """The server's environment changes (VIRTUAL_ENV of this venv would mislead the
        vLLM venv's tools)."""
        env: dict[str, str | None] = {
            "VLLM_CPU_KVCACHE_SPACE": str(self.kv_cache_gib),
            "VIRTUAL_ENV": None,
        }
        if self.dev_mode:
            env["VLLM_SERVER_DEV_MODE"] = "1"
        if self.cpu_bind is not None:
            env["VLLM_CPU_OMP_THREADS_BIND"] = self.cpu_bind
        if self.nixl_side_channel_port is not None:
            env["VLLM_NIXL_SIDE_CHANNEL_HOST"] = "127.0.0.1"
            env["VLLM_NIXL_SIDE_CHANNEL_PORT"] = str(self.nixl_side_channel_port)
        return env

    def args(self, model_dir: Path, port: int) -> list[str]:
        optional = []
        if self.num_blocks is not None:
            optional += ["--num-gpu-blocks-override", str(self.num_blocks)]
        if self.served_model_name is not None:
            optional += ["--served-model-name", self.served_model_name]
        if self.kv_events is not None:
            optional += ["--kv-events-config", self.kv_events.config_json()]
        if self.data_parallel_size > 1:
            optional += ["--data-parallel-size", str(self.data_parallel_size)]
        if self.kv_transfer_config is not None:
            optional += ["--kv-transfer-config", self.kv_transfer_config]
        if self.lora_modules:
            optional += [
                "--enable-lora",
                "--max-loras",
                str(self.max_loras),
                "--max-lora-rank",
                str(self.max_lora_rank),
                "--lora-modules",
                *(f"{name}={path}" for name, path in self.lora_modules),
            ]
        return [
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            str(model_dir),
            "--load-format",
            self.load_format,
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
            *optional,
        ]


def set_autogroup_nice(pid: int, niceness: int) -> bool:
    """Set the nice value of the scheduler autogroup `pid` belongs to; False if impossible.

    With autogroups on (`/proc/sys/kernel/sched_autogroup_enabled`, the default of most
    distributions) the kernel first shares the CPU equally among sessions and only then by
    niceness inside each: a process's own niceness does not make other sessions' work yield
    to it, its autogroup's does. The vLLM server runs in a session of its own."""
    try:
        Path(f"/proc/{pid}/autogroup").write_text(f"{niceness}\n")
    except OSError:
        return False
    return True


@contextmanager
def vllm_server(
    python: Path,
    model_dir: Path,
    settings: ServerSettings,
    log_path: Path,
    niceness: int = 0,
    *,
    autogroup_nice: int | None = None,
    ready_timeout_s: float = 300.0,
) -> Iterator[str]:
    """`with vllm_server(...) as url:` — started and healthy inside, stopped after.

    `niceness` is added to this process's for the server (`nice -n`); `autogroup_nice`, if
    given, is set for the server's session (`set_autogroup_nice`)."""
    server, url = _server_process(python, model_dir, settings, log_path, niceness)
    with server.start():
        if autogroup_nice is not None and not set_autogroup_nice(server.pid, autogroup_nice):
            log.warning("cannot set the vLLM session's autogroup nice to %d", autogroup_nice)
        server.wait_for_http(url + "/health", timeout_s=ready_timeout_s, interval_s=0.5)
        log.info("vLLM healthy")
        yield url
        log.info("stopping vLLM (pid %d)", server.pid)


@contextmanager
def vllm_servers(
    python: Path,
    model_dir: Path,
    settings: Sequence[ServerSettings],
    log_paths: Sequence[Path],
    *,
    ready_timeout_s: float = 300.0,
) -> Iterator[list[str]]:
    """`with vllm_servers(...) as urls:` — one server per settings, started together (their
    start-ups overlap), all healthy inside, all stopped after."""
    with ExitStack() as stack:
        children = []
        for one, log_path in zip(settings, log_paths, strict=True):
            server, url = _server_process(python, model_dir, one, log_path)
            children.append((stack.enter_context(server.start()), url))
        for server, url in children:
            server.wait_for_http(url + "/health", timeout_s=ready_timeout_s, interval_s=0.5)
        log.info("%d vLLM servers healthy", len(children))
        yield [url for _, url in children]
        log.info("stopping vLLM (pids %s)", ", ".join(str(s.pid) for s, _ in children))


def _server_process(
    python: Path, model_dir: Path, settings: ServerSettings, log_path: Path, niceness: int = 0
) -> tuple[ChildProcess, str]:
    """The server's process, not started yet, on a free port; and its URL."""
    port = free_port()
    cmd = [str(python), *settings.args(model_dir, port)]
    if niceness:
        # Children (the engine core) inherit it: other work on the machine yields to vLLM.
        cmd = ["nice", "-n", str(niceness), *cmd]
    log.info("vLLM on port %d (log: %s)", port, log_path)
    server = ChildProcess(
        cmd, log_path, env=settings.env(), stop_signal=signal.SIGTERM, stop_timeout_s=20
    )
    return server, f"http://127.0.0.1:{port}"
