"""Run N emulated replicas in one process, one uvicorn server each, on consecutive ports.

A P/D fleet (`prefill` + `decode` replicas, or `replicas` of one `role`) speaks `pd_protocol`
(`sim.emulator.disagg`); SGLang prefill replicas also serve a bootstrap port each, from
`bootstrap_port` (default 8998, or free ports with `port` 0) up.

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
from sim.emulator.disagg.bootstrap import BootstrapApp
from sim.emulator.disagg.settings import (
    DEFAULT_LEASE_S,
    SGLANG_BOOTSTRAP_PORT,
    PDSettings,
    Protocol,
    Role,
)
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
    role: Role = "both"  # every replica's, unless `prefill` or `decode` is set
    prefill: int = 0  # a mixed P/D fleet: this many prefill replicas first,
    decode: int = 0  # then this many decode replicas (`replicas` = their sum)
    pd_protocol: Protocol = "vllm"
    kv_lease_s: float = DEFAULT_LEASE_S
    bootstrap_port: int | None = None  # SGLang P i's is this + i; None: 8998, or 0 with port 0
    decode_prefix_cache: bool = False  # an SGLang D keeps a prefix cache (PDSettings)

    def __post_init__(self) -> None:
        if (self.prefill or self.decode) and self.replicas != self.prefill + self.decode:
            raise ValueError("a P/D fleet has replicas = prefill + decode")

    def roles(self) -> list[Role]:
        """Each replica's role, in port order."""
        if self.prefill or self.decode:
            prefill: list[Role] = ["prefill"] * self.prefill
            decode: list[Role] = ["decode"] * self.decode
            return prefill + decode
        return [self.role] * self.replicas

    def pd_settings(self, replica: int) -> PDSettings:
        role = self.roles()[replica]
        bootstrap = None
        if role == "prefill" and self.pd_protocol == "sglang":
            first = self.bootstrap_port
            if first is None:
                first = SGLANG_BOOTSTRAP_PORT if self.port else 0
            bootstrap = first + self.roles()[:replica].count("prefill") if first else 0
        return PDSettings(
            role,
            self.pd_protocol,
            lease_s=self.kv_lease_s,
            decode_prefix_cache=self.decode_prefix_cache,
            bootstrap_port=bootstrap,
        )

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
    apps = []
    for i in range(settings.replicas):
        pd = settings.pd_settings(i)
        own = profile
        if not pd.caches_prefixes:  # an SGLang decode server without its radix cache
            own = replace(profile, config=replace(profile.config, enable_prefix_caching=False))
        replica = Replica(own, settings.model, settings.speedup, settings.lora, events)
        apps.append(EmulatorApp(replica, tokenizer, pd))
    return apps


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
        servers.append(_server(app, settings.host, port))
    bootstraps = {
        i: _server(BootstrapApp(app.pd), settings.host, app.pd.settings.bootstrap_port or 0)
        for i, app in enumerate(apps)
        if app.pd.settings.serves_bootstrap
    }
    servers += bootstraps.values()

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
    for i, bootstrap in bootstraps.items():
        if bootstrap.started:
            apps[i].pd.bootstrap_port = _bound_port(bootstrap)
    for i, s in enumerate(servers[: len(apps)]):
        if s.started:
            role = apps[i].pd.settings.role
            name = f"replica {i}" if role == "both" else f"replica {i} ({role})"
            print(f"{name}: http://{settings.host}:{_bound_port(s)}", flush=True)
            if i in bootstraps:
                print(f"{name} bootstrap: {apps[i].pd.bootstrap_port}", flush=True)
    for i, p in enumerate(publishers):
        print(f"replica {i} kv-events: {p.endpoint} replay {p.replay_endpoint}", flush=True)
    profile = resolve_profile(settings)
    print(
        f"emulating {settings.replicas} replica(s) of {settings.model!r}, profile "
        f"{profile.name!r} ({profile.config.num_blocks} KV blocks of "
        f"{profile.config.block_size}), speedup {settings.speedup}"
        + _lora_note(settings.lora)
        + _pd_note(settings),
        file=sys.stderr,
        flush=True,
    )
    await asyncio.gather(*tasks)


def _lora_note(lora: LoraSettings) -> str:
    if not lora.adapters:
        return ""
    return f"; LoRA adapters {', '.join(lora.adapters)} (max_loras {lora.max_loras})"


def _pd_note(settings: EmulatorSettings) -> str:
    roles = settings.roles()
    if roles.count("both") == len(roles):
        return ""
    counts = ", ".join(f"{roles.count(r)} {r}" for r in ("prefill", "decode", "both") if r in roles)
    return f"; P/D over {settings.pd_protocol}: {counts} (KV lease {settings.kv_lease_s} s)"


def _server(app: object, host: str, port: int) -> _Server:
    config = uvicorn.Config(
        app,  # type: ignore[arg-type]
        host=host,
        port=port,
        lifespan="on",
        log_level="warning",
        access_log=False,
        ws="none",
    )
    return _Server(config)


def _bound_port(server: uvicorn.Server) -> int:
    sock: socket.socket = server.servers[0].sockets[0]
    return int(sock.getsockname()[1])
