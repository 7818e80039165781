"""`kvgate emulate`: N emulated vLLM (or SGLang) replicas, the engine model in real time behind
the engine's HTTP surface (and, optionally, vLLM's KV-cache events)."""

from __future__ import annotations

import argparse
import importlib.util
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING

from kvgate.cli.listen import check_can_listen
from routing.config.schema import ConfigError
from sim.emulator.disagg.settings import (
    DEFAULT_LEASE_S,
    PROTOCOLS,
    ROLES,
    SGLANG_BOOTSTRAP_PORT,
)
from sim.emulator.engines import ENGINES
from sim.emulator.lora import LoraSettings

DEFAULT_REPLICAS = 4

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
        help="run N emulated vLLM or SGLang replicas (engine model in real time, their HTTP "
        "surface)",
        description="Emulated vLLM (or SGLang) replicas whose timing, prefix cache and metrics "
        "come from kvgate's engine model. Prints one `replica N: URL` line per replica (N from "
        "0).",
        epilog=_engine_profiles_epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    e.add_argument("--replicas", type=int, help=f"number of replicas (default {DEFAULT_REPLICAS})")
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
        "--engine",
        choices=ENGINES,
        default="vllm",
        help="whose HTTP surface and metric names to show: vllm, or sglang (adds /generate, "
        "/v1/rerank, /v1/score and SGLang's metric names; default %(default)s)",
    )
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
        "--data-parallel-size",
        type=int,
        default=1,
        metavar="N",
        help="N data-parallel ranks behind each replica's port, each its own engine model and KV "
        "cache (as vLLM's --data-parallel-size, SGLang's --dp-size): a request goes to the rank "
        "named by vLLM's X-data-parallel-rank header (SGLang: body field routed_dp_rank), else "
        'to the least loaded; metrics per rank (engine="R"; SGLang: dp_rank), rank R\'s KV '
        "events on its replica's ports + R (default 1)",
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
    _add_pd_arguments(e)


def _add_pd_arguments(e: argparse.ArgumentParser) -> None:
    g = e.add_argument_group(
        "disaggregated prefill/decode",
        "Replicas that play P or D of a P/D pair, as vLLM (NixlConnector: P answers "
        "kv_transfer_params, D pulls the blocks) or SGLang (bootstrap rooms: P and D get the "
        "same request) does. Roles are printed: `replica N (prefill): URL`, and an SGLang "
        "prefill replica's `replica N (prefill) bootstrap: PORT`.",
    )
    g.add_argument(
        "--role",
        choices=ROLES,
        default="both",
        help="every replica's role (default both: whole requests)",
    )
    g.add_argument(
        "--prefill",
        type=int,
        default=0,
        metavar="N",
        help="a mixed fleet instead of --replicas: N prefill replicas first, ...",
    )
    g.add_argument("--decode", type=int, default=0, metavar="M", help="... then M decode replicas")
    g.add_argument(
        "--pd-protocol",
        choices=PROTOCOLS,
        default="vllm",
        help="how P and D meet (default vllm)",
    )
    g.add_argument(
        "--kv-lease",
        type=float,
        default=DEFAULT_LEASE_S,
        metavar="S",
        help="P frees an unread prefill's KV blocks after S modelled seconds (vLLM's "
        "kv_lease_duration; SGLang: also how long P waits for D; default %(default)s)",
    )
    g.add_argument(
        "--bootstrap-port",
        type=int,
        metavar="P",
        help=f"SGLang: prefill replica K serves its bootstrap port on P+K (default "
        f"{SGLANG_BOOTSTRAP_PORT}; free ports with --port 0); 0 picks free ports",
    )
    g.add_argument(
        "--decode-prefix-cache",
        action="store_true",
        help="SGLang: decode replicas keep a prefix cache (SGLang's keep none by default, so "
        "every prompt block is transferred)",
    )


def run(args: argparse.Namespace) -> int:
    import uvloop

    from sim.emulator.server import EmulatorSettings, serve
    from sim.engine.profiles import get_profile

    _resolve_fleet(args)
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
    _check_data_parallel(args)
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
        role=args.role,
        prefill=args.prefill,
        decode=args.decode,
        pd_protocol=args.pd_protocol,
        kv_lease_s=args.kv_lease,
        bootstrap_port=args.bootstrap_port,
        decode_prefix_cache=args.decode_prefix_cache,
        engine=args.engine,
        data_parallel_size=args.data_parallel_size,
    )
    ports = list(range(args.port, args.port + args.replicas)) if args.port else []
    ports += [p for i in range(args.replicas) if (p := settings.pd_settings(i).bootstrap_port)]
    if args.kv_events_port:  # port 0: every socket picks a free one
        for i in range(args.replicas):
            for r in range(args.data_parallel_size):
                ports += [settings.publisher_port(i, r), settings.replay_port(i, r)]
    if len(set(ports)) < len(ports):
        raise ConfigError(
            "--port, --kv-events-port, --kv-events-replay-port and --bootstrap-port ranges overlap"
        )
    check_can_listen(args.host, ports)
    uvloop.run(serve(settings))
    return 0


def _resolve_fleet(args: argparse.Namespace) -> None:
    """Set `args.replicas` from --prefill/--decode; ConfigError for P/D flags that clash."""
    if args.prefill < 0 or args.decode < 0:
        raise ConfigError("--prefill and --decode must be >= 0")
    if args.prefill or args.decode:
        if args.replicas is not None or args.role != "both":
            raise ConfigError("--prefill/--decode make the fleet: drop --replicas and --role")
        args.replicas = args.prefill + args.decode
    elif args.replicas is None:
        args.replicas = DEFAULT_REPLICAS
    if args.kv_lease <= 0:
        raise ConfigError("--kv-lease must be > 0")
    if args.bootstrap_port is not None:
        has_prefill = args.prefill or args.role == "prefill"
        if args.pd_protocol != "sglang" or not has_prefill:
            raise ConfigError(
                "--bootstrap-port is for SGLang prefill replicas (--pd-protocol sglang)"
            )
        last = args.bootstrap_port + (args.prefill or args.replicas) - 1
        if args.bootstrap_port < 0 or (args.bootstrap_port and last > 65535):
            raise ConfigError(
                f"--bootstrap-port: ports {args.bootstrap_port}-{last} out of 0-65535"
            )


def _check_data_parallel(args: argparse.Namespace) -> None:
    """ConfigError for a rank count out of range, or combined with what ranks do not model."""
    n = args.data_parallel_size
    if not 1 <= n <= 64:
        raise ConfigError("--data-parallel-size must be in 1-64")
    if n > 1 and (args.lora or args.prefill or args.decode or args.role != "both"):
        raise ConfigError("--data-parallel-size: not with --lora or prefill/decode roles")


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
    sockets = args.replicas * args.data_parallel_size  # one publisher a rank
    last = port + (2 if replay is None else 1) * sockets - 1
    for flag, first, end in (
        ("--kv-events-port", port, last),
        ("--kv-events-replay-port", replay, (replay or 0) + sockets - 1),
    ):
        if first is not None and (first < 0 or (first and end > 65535)):
            raise ConfigError(f"{flag}: ports {first}-{end} out of 0-65535")
