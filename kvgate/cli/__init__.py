"""`kvgate` command line: serve the gateway, run it as an endpoint picker, check a config
file, hash an API key, emulate engines, run the demo, simulate, tune the routing profile. One
module per command, each with `add_parser(sub)` and `run(args)`; this one builds the parser
and dispatches.

CLI flags cover process concerns only (where to listen, log level, where to record) plus quick
overrides for the backends and the default policy; everything else is in the YAML config file.
The flags of `serve` and `epp` can also be set by `KVGATE_*` variables (`kvgate.cli.env`).
Exit status: 0 on success, 1 when a server cannot listen (or the demo saw errors), 2 for a bad
command line or config file, 3 when a sweep lost a run on a Ray cluster.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

from kvgate.cli import check_config, demo, emulate, epp, hash_key, serve, sim, tune
from kvgate.cli.listen import ListenError
from kvgate.cli.options import EnvParser, VersionAction
from routing.config.schema import ConfigError

if TYPE_CHECKING:
    from kvgate.cli.options import SubParsers

DESCRIPTION = """\
kvgate: a KV-cache- and prefix-aware gateway for pools of OpenAI-compatible LLM engines
(vLLM, SGLang, ...). It relays OpenAI API requests to the replica that should serve them.
"""

MAIN_EPILOG = """\
Every flag of `kvgate serve` and `kvgate epp` can also be set by a KVGATE_* environment
variable (--port: KVGATE_PORT), named in their --help; a flag given wins over it.
"""


class Command(Protocol):
    """A command's module: its subparser and what runs it (the exit status)."""

    def add_parser(self, sub: SubParsers) -> None: ...

    def run(self, args: argparse.Namespace) -> int: ...


# In `kvgate --help`'s order.
COMMANDS: dict[str, Command] = {
    "serve": serve,
    "epp": epp,
    "emulate": emulate,
    "demo": demo,
    "check-config": check_config,
    "hash-key": hash_key,
    "sim": sim,
    "tune": tune,
}


def build_parser(environ: Mapping[str, str] | None = None) -> argparse.ArgumentParser:
    """The parser; `environ` (default `os.environ`) holds the `KVGATE_*` variables."""
    p = EnvParser(
        os.environ if environ is None else environ,
        prog="kvgate",
        description=DESCRIPTION,
        epilog=MAIN_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--version", action=VersionAction)
    sub = p.add_subparsers(
        dest="command", metavar="COMMAND", required=True, parser_class=argparse.ArgumentParser
    )
    for command in COMMANDS.values():
        command.add_parser(sub)
    return p


def main(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    """Run `kvgate ARGV`; `environ` (default `os.environ`) holds the `KVGATE_*` variables."""
    args = build_parser(environ).parse_args(argv)
    try:
        return COMMANDS[args.command].run(args)
    except ConfigError as exc:
        print(f"kvgate: {exc}", file=sys.stderr)
        return 2
    except ListenError as exc:
        print(f"kvgate: {exc}", file=sys.stderr)
        return 1
