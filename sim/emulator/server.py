"""Run N emulated replicas in one process, one uvicorn server each, on consecutive ports."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field, replace

import uvicorn

from sim.emulator.app import EmulatorApp
from sim.emulator.lora import LoraSettings
from sim.emulator.replica import Replica
from sim.engine.profiles import get_profile
from sim.engine.tokenizer import BuiltinTokenizer, HFTokenizer, Tokenizer
from sim.engine.types import EngineProfile

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class EmulatorSettings:
    replicas: int = 4
    host: str = "127.0.0.1"
    port: int = 8001  # first replica's port; 0 lets each pick a free one
    profile: str = "demo"
    model: str = "kvgate-demo"
    speedup: float = 1.0
    tokenizer: str | None = None  # path of a tokenizer.json; default: the built-in tokenizer
    num_gpu_blocks: int | None = None  # override the profile's KV capacity (like vLLM's flag)
    max_model_len: int | None = None  # override the profile's context limit
    lora: LoraSettings = field(default_factory=LoraSettings)  # adapters on top of `model`


def resolve_profile(settings: EmulatorSettings) -> EngineProfile:
    profile = get_profile(settings.profile)
    config = profile.config
    if settings.num_gpu_blocks is not None:
        config = replace(config, num_blocks=settings.num_gpu_blocks)
    if settings.max_model_len is not None:
        config = replace(config, max_model_len=settings.max_model_len)
    return replace(profile, config=config)


class _Server(uvicorn.Server):
    """A uvicorn server that leaves signal handling to the fleet (several share one loop)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def make_tokenizer(path: str | None) -> Tokenizer:
    return HFTokenizer(path) if path else BuiltinTokenizer()


def make_apps(settings: EmulatorSettings) -> list[EmulatorApp]:
    profile = resolve_profile(settings)
    tokenizer = make_tokenizer(settings.tokenizer)
    return [
        EmulatorApp(Replica(profile, settings.model, settings.speedup, settings.lora), tokenizer)
        for _ in range(settings.replicas)
    ]


async def serve(settings: EmulatorSettings) -> None:
    """Serve until SIGINT/SIGTERM; prints one `replica N: URL` line per replica."""
    apps = make_apps(settings)
    servers = []
    for i, app in enumerate(apps):
        port = settings.port + i if settings.port else 0
        config = uvicorn.Config(
            app,
            host=settings.host,
            port=port,
            lifespan="on",
            log_level="warning",
            access_log=False,
            ws="none",
        )
        servers.append(_Server(config))

    def stop_all() -> None:
        for s in servers:
            s.should_exit = True

    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop_all)
    tasks = [asyncio.create_task(s.serve()) for s in servers]
    while not all(s.started for s in servers):
        if any(t.done() for t in tasks):
            break
        await asyncio.sleep(0.01)
    for i, s in enumerate(servers):
        if s.started:
            sock: socket.socket = s.servers[0].sockets[0]
            port = sock.getsockname()[1]
            print(f"replica {i}: http://{settings.host}:{port}", flush=True)
    profile = resolve_profile(settings)
    print(
        f"emulating {settings.replicas} replica(s) of {settings.model!r}, profile "
        f"{profile.name!r} ({profile.config.num_blocks} KV blocks of "
        f"{profile.config.block_size}), speedup {settings.speedup}" + _lora_note(settings.lora),
        file=sys.stderr,
        flush=True,
    )
    await asyncio.gather(*tasks)


def _lora_note(lora: LoraSettings) -> str:
    if not lora.adapters:
        return ""
    return f"; LoRA adapters {', '.join(lora.adapters)} (max_loras {lora.max_loras})"
