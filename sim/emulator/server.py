"""Run N emulated replicas in one process, one uvicorn server each, on consecutive ports.

A P/D fleet (`prefill` + `decode` replicas, or `replicas` of one `role`) speaks `pd_protocol`
(`sim.emulator.disagg`); SGLang prefill replicas also serve a bootstrap port each, from
`bootstrap_port` (default 8998, or free ports with `port` 0) up.

With `kv_events_port` set, replica i also publishes its KV-cache events on
`tcp://host:kv_events_port + i` and answers replay requests on `kv_events_replay_port + i`
(default: `kv_events_port + replicas + i`, the ports after the publishers'); port 0 picks
free ports for both. See `sim.emulator.kv_publisher`. With `data_parallel_size` N each replica
is N ranks behind one port (`sim.emulator.data_parallel`), rank r publishing on its replica's
rank-0 ports + r (index `replica × N + r` from the first ports).
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
from sim.emulator.engines import Engine
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
    engine: Engine = "vllm"  # whose HTTP surface and metric names the replicas show
    data_parallel_size: int = 1  # ranks behind each replica's endpoint (`data_parallel`)

    def __post_init__(self) -> None:
        if (self.prefill or self.decode) and self.replicas != self.prefill + self.decode:
            raise ValueError("a P/D fleet has replicas = prefill + decode")
        if self.data_parallel_size < 1:
            raise ValueError("data_parallel_size must be >= 1")

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

    def publisher_port(self, replica: int, rank: int = 0) -> int:
        """Rank `rank` of replica `replica`'s KV-event port (0: a free one)."""
        first = self.kv_events_port or 0
        return first + replica * self.data_parallel_size + rank if first else 0

    def replay_port(self, replica: int, rank: int = 0) -> int:
        """Rank `rank` of replica `replica`'s replay port (0: a free one); needs
        `kv_events_port`."""
        first = self.kv_events_port or 0
        if self.kv_events_replay_port is not None:
            first = self.kv_events_replay_port
        elif first:
            first += self.replicas * self.data_parallel_size
        return first + replica * self.data_parallel_size + rank if first else 0


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
        n = settings.data_parallel_size
        ranks = [
            Replica(
                own,
                settings.model,
                settings.speedup,
                settings.lora,
                events,
                engine=settings.engine,
                rank=r if n > 1 else None,  # a rank's series and events name it
            )
            for r in range(n)
        ]
        apps.append(EmulatorApp(ranks[0], tokenizer, pd, ranks))
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
    publishers: list[KVEventPublisher] = []
    try:
        for i, app in enumerate(apps):
            ranks = _bind_ranks(ctx, settings, i) if len(app.ranks) > 1 else None
            for r, rank in enumerate(app.ranks):
                publisher = ranks[r] if ranks is not None else _publisher(ctx, settings, i, 0)
                publishers.append(publisher)
                rank.on_kv_events = publisher.publish
    except BaseException:
        for p in publishers:
            p.close()
        raise
    return publishers


def _publisher(
    ctx: zmq.asyncio.Context, settings: EmulatorSettings, replica: int, rank: int, *ports: int
) -> KVEventPublisher:
    from sim.emulator.kv_publisher import KVEventPublisher

    port, replay = ports or (
        settings.publisher_port(replica, rank),
        settings.replay_port(replica, rank),
    )
    return KVEventPublisher(
        ctx, settings.host, port, replay,
        topic=settings.kv_events_topic, adapters=settings.lora.adapters, rank=rank,
    )  # fmt: skip


def _bind_ranks(
    ctx: zmq.asyncio.Context, settings: EmulatorSettings, replica: int, tries: int = 20
) -> list[KVEventPublisher]:
    """A data-parallel replica's publishers, rank r on its rank 0's ports + r (as vLLM binds
    them); with free ports, runs of free ports are searched for."""
    import zmq

    n = settings.data_parallel_size
    for attempt in range(tries):
        bound: list[KVEventPublisher] = []
        try:
            first = _publisher(ctx, settings, replica, 0)
            bound.append(first)
            base, replay_base = _port_of(first.endpoint), _port_of(first.replay_endpoint)
            for r in range(1, n):
                bound.append(_publisher(ctx, settings, replica, r, base + r, replay_base + r))
            return bound
        except zmq.ZMQError:
            for p in bound:
                p.close()
            if settings.kv_events_port or attempt == tries - 1:
                raise
    raise AssertionError("unreachable")


def _port_of(endpoint: str) -> int:
    return int(endpoint.rsplit(":", 1)[1])


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
    for i, p in enumerate(publishers[:: settings.data_parallel_size]):  # rank 0's: the base
        print(f"replica {i} kv-events: {p.endpoint} replay {p.replay_endpoint}", flush=True)
    profile = resolve_profile(settings)
    print(
        f"emulating {settings.replicas} replica(s) of {settings.model!r}, profile "
        f"{profile.name!r} ({profile.config.num_blocks} KV blocks of "
        f"{profile.config.block_size}), speedup {settings.speedup}"
        + ("" if settings.engine == "vllm" else f"; as {settings.engine}")
        + (
            f"; {settings.data_parallel_size} data-parallel ranks each"
            if settings.data_parallel_size > 1
            else ""
        )
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
