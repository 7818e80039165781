"""`kvgate emulate`: N emulated vLLM replicas, the engine model in real time behind vLLM's
HTTP surface (and, optionally, its KV-cache events)."""

from __future__ import annotations

import argparse
import importlib.util
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING

from kvgate.cli.listen import check_can_listen
from routing.config.schema import ConfigError
from sim.emulator.lora import LoraSettings

if TYPE_CHECKING:
    from kvgate.cli.options import SubParsers


def _engine_profiles_epilog() -> str:
    # Imported here, not at the top: only the emulator and the simulator use engine profiles.
    from sim.engine.profiles import PROFILES

    width = max(map(len, PROFILES))
    lines = [
        textwrap.fill(
            p.description,
            width=88,
            initial_indent=f"  {name:<{width}}  ",
            subsequent_indent=" " * (width + 4),
        )
        for name, p in PROFILES.items()
    ]
    return "engine profiles (--profile):\n" + "\n".join(lines)


def add_parser(sub: SubParsers) -> None:
    e = sub.add_parser(
        "emulate",
        help="run N emulated vLLM replicas (engine model in real time, vLLM's HTTP surface)",
        description="Emulated vLLM replicas whose timing, prefix cache and metrics come from "
        "kvgate's engine model. Prints one `replica N: URL` line per replica (N from 0).",
        epilog=_engine_profiles_epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    e.add_argument("--replicas", type=int, default=4, help="number of replicas (default 4)")
    e.add_argument("--host", default="127.0.0.1", help="address (default 127.0.0.1)")
    e.add_argument(
        "--port",
        type=int,
        default=8001,
        help="first replica's port, the others follow; 0 picks free ports (default 8001)",
    )
    e.add_argument("--profile", default="demo", help="engine profile (default demo; see below)")
    e.add_argument("--model", default="kvgate-demo", help="served model name (default %(default)s)")
    e.add_argument(
        "--speedup",
        type=float,
        default=1.0,
        help="run X times faster than real time: modelled durations / X (default 1)",
    )
    e.add_argument(
        "--tokenizer",
        metavar="FILE",
        help="a Hugging Face tokenizer.json to use instead of the built-in tokenizer (needs "
        "the optional `tokenizers` package)",
    )
    e.add_argument(
        "--num-gpu-blocks",
        type=int,
        metavar="N",
        help="override the profile's number of KV blocks (like vLLM's --num-gpu-blocks-override)",
    )
    e.add_argument(
        "--max-model-len",
        type=int,
        metavar="N",
        help="override the profile's context length limit (like vLLM's flag)",
    )
    e.add_argument(
        "--lora",
        nargs="+",
        default=[],
        metavar="NAME",
        help="LoRA adapters to serve on top of --model: listed in /v1/models with the model as "
        "parent, reported in vllm:lora_requests_info",
    )
    e.add_argument(
        "--max-loras",
        type=int,
        default=LoraSettings().max_loras,
        metavar="N",
        help="distinct adapters batched at once, as vLLM's flag (default %(default)s)",
    )
    e.add_argument(
        "--kv-events-port",
        type=int,
        metavar="P",
        help="publish vLLM KV-cache events (ZMQ PUB, vLLM 0.32's wire format): replica N on "
        "tcp://HOST:P+N; 0 picks free ports (printed as `replica N kv-events: ...`). Off by "
        "default",
    )
    e.add_argument(
        "--kv-events-replay-port",
        type=int,
        metavar="R",
        help="replica N answers vLLM replay requests (ZMQ ROUTER) on R+N (default: the ports "
        "after the publishers', P+replicas+N; free ports when P is 0)",
    )
    e.add_argument(
        "--kv-events-topic",
        default="",
        metavar="TOPIC",
        help="topic frame of every event message (default empty, as vLLM's)",
    )


def run(args: argparse.Namespace) -> int:
    import uvloop

    from sim.emulator.server import EmulatorSettings, serve
    from sim.engine.profiles import get_profile

    if args.replicas < 1 or args.speedup <= 0:
        raise ConfigError("--replicas must be >= 1 and --speedup > 0")
    last_port = args.port + args.replicas - 1
    if args.port < 0 or (args.port and last_port > 65535):
        raise ConfigError(f"--port: replica ports {args.port}-{last_port} out of 0-65535")
    if args.tokenizer is not None:
        if not Path(args.tokenizer).is_file():
            raise ConfigError(f"--tokenizer {args.tokenizer}: no such file")
        if importlib.util.find_spec("tokenizers") is None:
            raise ConfigError("--tokenizer needs the `tokenizers` package: pip install tokenizers")
    try:
        get_profile(args.profile)
    except KeyError as exc:
        raise ConfigError(str(exc.args[0])) from None
    try:
        lora = LoraSettings(tuple(args.lora), max_loras=args.max_loras)
    except ValueError as exc:
        raise ConfigError(f"--lora/--max-loras: {exc}") from None
    if args.model in lora.adapters:
        raise ConfigError(f"--lora: {args.model!r} is the served model's own name")
    _check_kv_event_ports(args)
    settings = EmulatorSettings(
        replicas=args.replicas,
        host=args.host,
        port=args.port,
        profile=args.profile,
        model=args.model,
        speedup=args.speedup,
        tokenizer=args.tokenizer,
        num_gpu_blocks=args.num_gpu_blocks,
        max_model_len=args.max_model_len,
        lora=lora,
        kv_events_port=args.kv_events_port,
        kv_events_replay_port=args.kv_events_replay_port,
        kv_events_topic=args.kv_events_topic,
    )
    ports = list(range(args.port, args.port + args.replicas)) if args.port else []
    if args.kv_events_port:  # port 0: every socket picks a free one
        for i in range(args.replicas):
            ports += [args.kv_events_port + i, settings.replay_port(i)]
    if len(set(ports)) < len(ports):
        raise ConfigError("--port, --kv-events-port and --kv-events-replay-port ranges overlap")
    check_can_listen(args.host, ports)
    uvloop.run(serve(settings))
    return 0


def _check_kv_event_ports(args: argparse.Namespace) -> None:
    """ConfigError unless the KV-event port ranges (publishers, replay sockets) fit."""
    port, replay = args.kv_events_port, args.kv_events_replay_port
    if port is None:
        if replay is not None:
            raise ConfigError("--kv-events-replay-port needs --kv-events-port")
        return
    if replay is not None and (replay == 0) != (port == 0):
        raise ConfigError(
            "--kv-events-port, --kv-events-replay-port: both 0 (free ports) or neither"
        )
    last = port + (2 if replay is None else 1) * args.replicas - 1
    for flag, first, end in (
        ("--kv-events-port", port, last),
        ("--kv-events-replay-port", replay, (replay or 0) + args.replicas - 1),
    ):
        if first is not None and (first < 0 or (first and end > 65535)):
            raise ConfigError(f"{flag}: ports {first}-{end} out of 0-65535")
