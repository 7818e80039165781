"""Run N emulated replicas in one process, one uvicorn server each, on consecutive ports.

With `kv_events_port` set, replica i also publishes its KV-cache events on
`tcp://host:kv_events_port + i` and answers replay requests on `kv_events_replay_port + i`
(default: `kv_events_port + replicas + i`, the ports after the publishers'); port 0 picks
free ports for both. See `sim.emulator.kv_publisher`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import uvicorn

from sim.emulator.app import EmulatorApp
from sim.emulator.lora import LoraSettings
from sim.emulator.replica import Replica
from sim.engine.profiles import get_profile
from sim.engine.tokenizer import BuiltinTokenizer, HFTokenizer, Tokenizer
from sim.engine.types import EngineProfile

if TYPE_CHECKING:
    import zmq.asyncio

    from sim.emulator.kv_publisher import KVEventPublisher

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
    kv_events_port: int | None = None  # replica i publishes KV events on this + i; 0: free
    kv_events_replay_port: int | None = None  # replay sockets' first port (see module doc)
    kv_events_topic: str = ""  # vLLM's default topic

    def replay_port(self, replica: int) -> int:
        """Replica `replica`'s replay port (0: a free one); needs `kv_events_port`."""
        first = self.kv_events_port or 0
        if self.kv_events_replay_port is not None:
            first = self.kv_events_replay_port
        elif first:
            first += self.replicas
        return first + replica if first else 0


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
    events = settings.kv_events_port is not None
    return [
        EmulatorApp(
            Replica(profile, settings.model, settings.speedup, settings.lora, events), tokenizer
        )
        for _ in range(settings.replicas)
    ]


async def serve(settings: EmulatorSettings) -> None:
    """Serve until SIGINT/SIGTERM; prints one `replica N: URL` line per replica."""
    apps = make_apps(settings)
    if settings.kv_events_port is None:
        await _serve_http(settings, apps)
        return
    # Imported here: the emulator without KV events never loads zmq.
    import zmq.asyncio

    from sim.emulator.kv_publisher import serve_replays

    ctx = zmq.asyncio.Context()
    publishers = []
    try:
        publishers = _bind_publishers(ctx, settings, apps)
        replays = asyncio.create_task(serve_replays(publishers))
        try:
            await _serve_http(settings, apps, publishers)
        finally:
            replays.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await replays
    finally:
        for p in publishers:
            p.close()
        ctx.term()


def _bind_publishers(
    ctx: zmq.asyncio.Context, settings: EmulatorSettings, apps: Sequence[EmulatorApp]
) -> list[KVEventPublisher]:
    from sim.emulator.kv_publisher import KVEventPublisher

    publishers: list[KVEventPublisher] = []
    try:
        for i, app in enumerate(apps):
            first = settings.kv_events_port or 0
            publisher = KVEventPublisher(
                ctx,
                settings.host,
                first + i if first else 0,
                settings.replay_port(i),
                topic=settings.kv_events_topic,
                adapters=settings.lora.adapters,
            )
            publishers.append(publisher)
            app.replica.on_kv_events = publisher.publish
    except BaseException:
        for p in publishers:
            p.close()
        raise
    return publishers


async def _serve_http(
    settings: EmulatorSettings,
    apps: Sequence[EmulatorApp],
    publishers: Sequence[KVEventPublisher] = (),
) -> None:
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
    for i, p in enumerate(publishers):
        print(f"replica {i} kv-events: {p.endpoint} replay {p.replay_endpoint}", flush=True)
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
