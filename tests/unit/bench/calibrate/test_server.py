"""vLLM's command line and environment from `ServerSettings` (nothing is started)."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

from bench.calibrate.server import ServerSettings, ipc_publisher


def _flags(args: list[str]) -> dict[str, str]:
    return {a: b for a, b in itertools.pairwise(args) if a.startswith("--")}


def test_defaults_leave_the_kv_size_to_the_memory_and_the_name_to_the_path() -> None:
    settings = ServerSettings()
    args = settings.args(Path("/m"), 8000)
    assert "--num-gpu-blocks-override" not in args and "--served-model-name" not in args
    assert _flags(args)["--model"] == "/m" and _flags(args)["--port"] == "8000"
    assert settings.env() == {"VLLM_CPU_KVCACHE_SPACE": "1", "VIRTUAL_ENV": None}


def test_blocks_name_dev_mode_and_cores() -> None:
    settings = ServerSettings(
        num_blocks=96, served_model_name="m", dev_mode=True, cpu_bind="1", max_model_len=2048
    )
    flags = _flags(settings.args(Path("/m"), 1))
    assert flags["--num-gpu-blocks-override"] == "96"
    assert flags["--served-model-name"] == "m"
    assert flags["--max-model-len"] == "2048" and flags["--block-size"] == "32"
    env = settings.env()
    assert env["VLLM_SERVER_DEV_MODE"] == "1" and env["VLLM_CPU_OMP_THREADS_BIND"] == "1"


def test_kv_events_on_ipc_sockets_and_lora_adapters(tmp_path: Path) -> None:
    publisher = ipc_publisher(tmp_path, topic="t")
    assert publisher.endpoint == f"ipc://{tmp_path.resolve()}/kv.pub"
    assert publisher.replay_endpoint == f"ipc://{tmp_path.resolve()}/kv.replay"
    settings = ServerSettings(kv_events=publisher, lora_modules=(("a", "/la"), ("b", "/lb")))
    args = settings.args(Path("/m"), 1)
    config = json.loads(_flags(args)["--kv-events-config"])
    assert config == {
        "enable_kv_cache_events": True,
        "publisher": "zmq",
        "endpoint": publisher.endpoint,
        "replay_endpoint": publisher.replay_endpoint,
        "topic": "t",
        "buffer_steps": 10_000,
    }
    assert "--enable-lora" in args and _flags(args)["--max-lora-rank"] == "8"
    start = args.index("--lora-modules") + 1
    assert args[start : start + 2] == ["a=/la", "b=/lb"]


def test_no_events_no_lora_by_default() -> None:
    args = ServerSettings().args(Path("/m"), 1)
    assert "--kv-events-config" not in args and "--enable-lora" not in args
