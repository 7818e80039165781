"""`kvgate hash-key`: the SHA-256 of an API key read from standard input, for the config's
`security.api_keys` (which then holds no key)."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from routing.config.schema import ConfigError

if TYPE_CHECKING:
    from kvgate.cli.options import SubParsers


def add_parser(sub: SubParsers) -> None:
    sub.add_parser(
        "hash-key",
        help="print the SHA-256 of an API key read from stdin (for security.api_keys)",
        description="Read one API key from standard input (a trailing newline is ignored) and "
        "print its hex SHA-256: the `sha256` of a security.api_keys entry, or "
        "security.admin_key_sha256. The config then holds no key. Example: "
        'printf %s "$KEY" | kvgate hash-key',
    )


def run(args: argparse.Namespace) -> int:
    from gateway.auth import hash_key

    key = sys.stdin.readline().rstrip("\r\n")
    if not key:
        raise ConfigError("hash-key: no key on standard input")
    print(hash_key(key))
    return 0
