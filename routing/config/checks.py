"""Checks of the `backends:` entries that the schema alone cannot express.

`check_backend_url` accepts what the upstream client can connect to and nothing else, so a
bad URL fails `check-config` (and `--backend`) with the field's path rather than `serve` at
its first request: scheme http or https, a host that is an IP address or a DNS name (IDNA
allowed), a port in 1–65535 if given, an optional path prefix; no credentials (the client
would not send them), query, fragment, whitespace or control characters.

`check_zmq_endpoint` accepts an address a ZMQ socket can connect to: `tcp://host:port` (no
wildcard host: the gateway connects, the engine binds) or `ipc://path`.

`duplicate_id_errors` reports every entry whose id (given, or `host:port[/path]` from the
URL, as the pool derives it) repeats an earlier entry's, at `backends.N.id`.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Sequence
from typing import Protocol
from urllib.parse import urlsplit

from pydantic_core import InitErrorDetails, PydanticCustomError

_LABEL = re.compile(r"^[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?$")


def check_zmq_endpoint(endpoint: str) -> str:
    """`endpoint` if a ZMQ socket can connect to it; ValueError says why."""
    if endpoint.startswith("ipc://") and len(endpoint) > len("ipc://"):
        return endpoint
    if not endpoint.startswith("tcp://"):
        raise ValueError("must be tcp://host:port or ipc://path")
    host, _, port = endpoint[len("tcp://") :].rpartition(":")
    if not host or host in ("*", "[::]", "0.0.0.0") or any(c.isspace() for c in host):
        raise ValueError("needs the engine's host (the gateway connects; vLLM binds tcp://*:P)")
    if not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ValueError("needs a port in 1-65535")
    return endpoint


def check_backend_url(url: str) -> str:
    """`url` without trailing slashes if a backend can be reached there; ValueError says why."""
    url = url.rstrip("/")  # before the checks, so "http:///" (no host) fails too
    if not url.startswith(("http://", "https://")):
        raise ValueError("must be an http:// or https:// URL")
    if any(c.isspace() or not c.isprintable() for c in url):
        raise ValueError("must not contain whitespace or control characters")
    try:
        parts = urlsplit(url)
    except ValueError as exc:  # a bracketed host that is no IPv6 address, say
        raise ValueError(f"not a valid URL: {exc}") from None
    if parts.query or parts.fragment or url.endswith(("?", "#")):
        raise ValueError("must not have a query or fragment")
    if "@" in parts.netloc:
        raise ValueError("must not hold credentials (user:password@)")
    try:
        port = parts.port
    except ValueError:
        raise ValueError(f"port in {parts.netloc!r} must be a number in 1-65535") from None
    if port == 0:
        raise ValueError("port must be in 1-65535")
    _check_host(parts.hostname or "", parts.netloc)
    return url


def _check_host(host: str, netloc: str) -> None:
    if not host:
        raise ValueError("must name a host")
    if netloc.startswith("["):
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise ValueError(f"{host!r} is not an IPv6 address") from None
        return
    try:
        ascii_host = host.encode("idna").decode("ascii")
    except UnicodeError:
        raise ValueError(f"host {host!r} is not a valid DNS name") from None
    labels = ascii_host.removesuffix(".").split(".")
    if len(ascii_host) > 253 or not all(_LABEL.match(label) for label in labels):
        raise ValueError(f"host {host!r} is not a valid DNS name or IP address")


class _Entry(Protocol):
    @property
    def url(self) -> str: ...

    @property
    def id(self) -> str | None: ...


def duplicate_id_errors(backends: Sequence[_Entry]) -> list[InitErrorDetails]:
    """An error at `backends.N.id` for each entry whose id an earlier entry has."""
    first: dict[str, int] = {}
    errors: list[InitErrorDetails] = []
    for i, entry in enumerate(backends):
        backend_id = entry.id or entry.url.split("://", 1)[-1]
        if backend_id not in first:
            first[backend_id] = i
            continue
        given = "" if entry.id else " (from its url)"
        errors.append(
            InitErrorDetails(
                type=PydanticCustomError(
                    "duplicate_backend_id",
                    "duplicate backend id '{id}'{given}: backends.{other} has it too",
                    {"id": backend_id, "given": given, "other": first[backend_id]},
                ),
                loc=("backends", i, "id"),
                input=entry.id,
            )
        )
    return errors
