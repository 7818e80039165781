"""`kvgate` command line: serve the gateway, check a config file.

CLI flags cover process concerns only (where to listen, log level) plus quick overrides for
the backends and the default policy; everything else is in the YAML config file.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from gateway.config import (
    ConfigError,
    GatewayConfig,
    load_config,
    parse_backend_arg,
    parse_config,
)

DESCRIPTION = """\
kvgate: a KV-cache- and prefix-aware gateway for pools of OpenAI-compatible LLM engines
(vLLM, SGLang, ...). It relays OpenAI API requests to the replica that should serve them.
"""

SERVE_EPILOG = """\
examples:
  kvgate serve --backend http://127.0.0.1:8001 --backend http://127.0.0.1:8002
  kvgate serve --config kvgate.yaml --policy session --port 8080
  kvgate serve --backend http://10.0.0.5:8000,engine=sglang,models=llama|qwen,id=gpu-5

--backend takes URL[,engine=vllm|sglang|trtllm|openai][,models=a|b][,id=NAME]; without
models= the backend's models are discovered from its GET /v1/models. Flags are added to the
backends of --config. deploy/kvgate.yaml documents every config field.
"""


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="kvgate", description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True)

    s = sub.add_parser(
        "serve",
        help="run the gateway (OpenAI API on /v1/*, /metrics, /health, /ready, /admin/*)",
        description="Run the gateway in front of a pool of engines.",
        epilog=SERVE_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    s.add_argument("--config", metavar="FILE", help="YAML config file (default: built-in defaults)")
    s.add_argument(
        "--backend",
        metavar="URL",
        action="append",
        default=[],
        help="an engine replica; repeat for each (see below)",
    )
    s.add_argument(
        "--policy",
        metavar="NAME",
        help="default routing policy (a profile name: round-robin, random, "
        "least-in-flight, power-of-two, session, or one from the config)",
    )
    s.add_argument("--host", help="address to listen on (default: config server.host, 127.0.0.1)")
    s.add_argument("--port", type=int, help="port to listen on; 0 picks a free one (default 8000)")
    s.add_argument(
        "--log-level",
        default="info",
        choices=["debug", "info", "warning", "error"],
        help="log level (default info)",
    )

    c = sub.add_parser(
        "check-config",
        help="validate a config file and print the effective configuration",
        description="Validate a config file; exit 2 naming each bad field if it is invalid.",
    )
    c.add_argument("config", metavar="FILE")
    return p


def _effective_config(args: argparse.Namespace) -> GatewayConfig:
    """The config file with the command line's overrides applied, validated again."""
    raw = load_config(args.config).model_dump()
    raw["backends"].extend(parse_backend_arg(b).model_dump() for b in args.backend)
    if args.host is not None:
        raw["server"]["host"] = args.host
    if args.port is not None:
        raw["server"]["port"] = args.port
    if args.policy:
        raw["routing"]["policy"] = args.policy
    return parse_config(raw, source="command line")


def _serve(args: argparse.Namespace) -> int:
    import uvicorn

    from gateway.access_log import RequestIdFilter
    from gateway.app import build_app

    logging.basicConfig(
        level=args.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s [%(request_id)s] %(message)s",
    )
    for handler in logging.getLogger().handlers:
        handler.addFilter(RequestIdFilter())
    cfg = _effective_config(args)
    app = build_app(cfg)
    uvicorn.run(
        app,
        host=cfg.server.host,
        port=cfg.server.port,
        loop="uvloop",
        http="httptools",
        lifespan="on",
        access_log=False,
        server_header=False,
        log_level=args.log_level,
        log_config=None,
    )
    return 0


def _check_config(args: argparse.Namespace) -> int:
    from gateway.app import build_app

    cfg = load_config(args.config)
    build_app(cfg)  # also instantiates every profile's plugins
    print(cfg.model_dump_json(indent=2))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "serve":
            return _serve(args)
        return _check_config(args)
    except ConfigError as exc:
        print(f"kvgate: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
