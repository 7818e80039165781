"""`KVGATE_*` environment variables for the flags of `kvgate serve` and `kvgate epp`.

Each long flag has one: `--port` is `KVGATE_PORT`, `--admin-port` `KVGATE_ADMIN_PORT`, named
in `--help`. A flag given on the command line wins over its variable, and the variable over
the config file; an empty variable counts as unset. `KVGATE_BACKEND` holds a list: backends
separated by spaces, or by commas before `http://` / `https://` (a backend's own options are
comma-separated: `http://a:8000,engine=sglang,http://b:8000`). A bad value fails the start
as a bad flag would (exit 2), naming the variable. The secrets (`KVGATE_API_KEYS`,
`KVGATE_ADMIN_KEY`, `KVGATE_UPSTREAM_API_KEY`) have no flag and are read where they are used.

`add_env_vars(parser)` gives a subcommand's parser its variables (each flag's default moves
here, so that "not given" can be told apart); `apply_env(args, environ)` fills in, after
parsing, every flag the command line left out.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

from routing.config.schema import ConfigError

PREFIX = "KVGATE_"
_LIST_SEPARATOR = re.compile(r"\s+|,(?=https?://)")


def env_name(option: str) -> str:
    """`--admin-port` -> `KVGATE_ADMIN_PORT`."""
    return PREFIX + option.lstrip("-").upper().replace("-", "_")


@dataclass(frozen=True, slots=True)
class EnvFlag:
    """One flag's variable, and how its text becomes the flag's value."""

    dest: str
    env: str
    default: Any
    convert: Callable[[str], Any] | None
    choices: Collection[Any] | None
    repeated: bool

    def parse(self, raw: str) -> Any:
        items = [v for v in _LIST_SEPARATOR.split(raw) if v] if self.repeated else [raw]
        values = [self._one(v) for v in items]
        return values if self.repeated else values[0]

    def _one(self, text: str) -> Any:
        try:
            value = self.convert(text) if self.convert is not None else text
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"{self.env}={text!r}: {exc}") from None
        if self.choices is not None and value not in self.choices:
            known = ", ".join(map(str, self.choices))
            raise ConfigError(f"{self.env}={text!r}: expected one of {known}")
        return value


def add_env_vars(parser: argparse.ArgumentParser) -> None:
    """Give every long flag of `parser` (added before this call) its variable."""
    flags = []
    for action in parser._actions:
        longs = [o for o in action.option_strings if o.startswith("--")]
        if not longs or isinstance(action, argparse._HelpAction):
            continue
        env = env_name(longs[0])
        repeated = isinstance(action, argparse._AppendAction)
        default = [] if repeated else action.default
        flags.append(EnvFlag(action.dest, env, default, action.type, action.choices, repeated))  # type: ignore[arg-type]
        action.default = None  # None after parsing: not given
        action.help = f"{action.help} [env {env}]" if action.help else f"[env {env}]"
    parser.set_defaults(env_flags=tuple(flags))


def apply_env(args: argparse.Namespace, environ: Mapping[str, str]) -> None:
    """Set each flag the command line did not give from its variable, else its default."""
    for flag in getattr(args, "env_flags", ()):
        if getattr(args, flag.dest) is not None:
            continue
        raw = environ.get(flag.env, "").strip()
        setattr(args, flag.dest, flag.parse(raw) if raw else flag.default)
