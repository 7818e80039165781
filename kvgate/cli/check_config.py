"""`kvgate check-config FILE`: validate a config file, build its routing profiles, print the
effective configuration (JSON); a bad file exits 2 naming each bad field."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from routing.config.schema import load_config

if TYPE_CHECKING:
    from kvgate.cli.options import SubParsers


def add_parser(sub: SubParsers) -> None:
    c = sub.add_parser(
        "check-config",
        help="validate a config file and print the effective configuration",
        description="Validate a config file and build its routing profiles; print the "
        "configuration with every default filled in (JSON). Exit 2 naming each bad field if "
        "it is invalid.",
    )
    c.add_argument("config", metavar="FILE", help="the YAML config file")


def run(args: argparse.Namespace) -> int:
    from gateway.compose import build_runtime

    cfg = load_config(args.config)
    build_runtime(cfg)  # also instantiates every profile's plugins
    print(cfg.model_dump_json(indent=2))
    return 0
