"""What the gateway tells engines and clients about each other (`security:` section).

Towards engines (`gateway.upstream.request_headers` applies it):
- `Authorization`: `pass` relays the client's; `strip` drops it; `replace` sends
  `Bearer $KVGATE_UPSTREAM_API_KEY`. Default: strip when client API keys are configured (a
  gateway key must not reach an engine's logs), else pass.
- `X-Forwarded-For`: the client address (ASGI scope `client`) appended to what the client
  sent, and `X-Forwarded-Proto` set to the scheme the client used (`forwarded_for`).

Towards clients, `x-kvgate-backend` names the backend that answered: `opaque` (default) is
the first 12 hex digits of HMAC-SHA256(salt, backend id), stable for the process (or across
gateways that share `backend_header_salt`) and shown next to each backend in
`/admin/backends`; `id` is the backend id itself (an internal host:port unless ids are set);
`off` sends nothing.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from gateway.asgi import Headers, Scope
from routing.config.schema import SecuritySection

UPSTREAM_KEY_ENV = "KVGATE_UPSTREAM_API_KEY"
OPAQUE_ID_HEX = 12

AuthorizationMode = Literal["pass", "strip", "replace"]
BackendHeaderMode = Literal["opaque", "id", "off"]


@dataclass(frozen=True, slots=True)
class HeaderPolicy:
    """Header rules for one gateway; the defaults are the behaviour before `security:`."""

    authorization: AuthorizationMode = "pass"
    upstream_authorization: bytes = b""  # the value sent with `replace`
    forwarded_for: bool = False
    backend_header: BackendHeaderMode = "id"
    backend_salt: bytes = b""

    def backend_tag(self, backend_id: str) -> bytes | None:
        """The `x-kvgate-backend` value for a backend, None when the header is off."""
        if self.backend_header == "id":
            return backend_id.encode()
        if self.backend_header == "off":
            return None
        return opaque_id(self.backend_salt, backend_id).encode()

    def upstream(self, out: Headers, client: str | None, scheme: str) -> None:
        """Apply the Authorization and forwarding rules to `out` (lower-case names), in place."""
        if self.authorization != "pass":
            out[:] = [(k, v) for k, v in out if k != b"authorization"]
            if self.authorization == "replace":
                out.append((b"authorization", self.upstream_authorization))
        if self.forwarded_for:
            # One loop, not two comprehensions: this runs for every request.
            forwarded: list[bytes] = []
            kept: Headers = []
            for k, v in out:
                if k == b"x-forwarded-for":
                    forwarded.append(v)
                if k not in _FORWARDED:
                    kept.append((k, v))
            out[:] = kept
            chain = b", ".join(forwarded)
            if client is not None:
                chain = chain + b", " + client.encode() if chain else client.encode()
            if chain:
                out.append((b"x-forwarded-for", chain))
            out.append((b"x-forwarded-proto", scheme.encode()))


_FORWARDED = frozenset({b"x-forwarded-for", b"x-forwarded-proto"})


@functools.lru_cache(maxsize=4096)  # per response otherwise: an HMAC is ~10 µs
def opaque_id(salt: bytes, backend_id: str) -> str:
    return hmac.new(salt, backend_id.encode(), hashlib.sha256).hexdigest()[:OPAQUE_ID_HEX]


def client_address(scope: Scope) -> str | None:
    """The peer's host from the ASGI scope (None over a Unix socket or when unknown)."""
    client = scope.get("client")
    return str(client[0]) if client else None


def build_header_policy(
    section: SecuritySection, keys_required: bool, environ: Mapping[str, str]
) -> HeaderPolicy:
    """The policy from config and environment; ValueError when `replace` has no key."""
    mode = section.upstream_authorization or ("strip" if keys_required else "pass")
    value = b""
    if mode == "replace":
        key = environ.get(UPSTREAM_KEY_ENV, "")
        if not key:
            raise ValueError(f"upstream_authorization: replace needs env {UPSTREAM_KEY_ENV}")
        value = b"Bearer " + key.encode()
    salt = section.backend_header_salt
    return HeaderPolicy(
        authorization=mode,
        upstream_authorization=value,
        forwarded_for=section.forwarded_for,
        backend_header=section.backend_header,
        backend_salt=salt.get_secret_value().encode() if salt else secrets.token_bytes(32),
    )
