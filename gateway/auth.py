"""Client API keys: who a request comes from (`Principal`), checked against hashed keys.

The config holds the hex SHA-256 of each key (`kvgate hash-key` prints it), never the key; a
presented key is hashed and compared with every stored digest by `hmac.compare_digest`, without
stopping at a match, so the time taken says nothing. Only `Authorization: Bearer <key>` is read
(not other schemes, nor `x-api-key`): one header to strip towards the engines.

Three sources, merged (a name or hash given twice is an error):
- `security.api_keys` in the config file;
- `security.api_keys_file`: the same list as YAML, re-read when its mtime changes (one `stat` a
  second at most, on the request path) or on SIGHUP; a file that fails to load keeps the
  previous keys and logs an error (at start-up, it fails the start);
- env `KVGATE_API_KEYS`: comma-separated plaintext keys (named `env-1`, ...) or `name:sha256`.

With no key from any source (and no keys file), every request is the anonymous principal.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import yaml
from pydantic import TypeAdapter, ValidationError

from gateway.errors import AuthenticationError
from routing.config.example_keys import check_not_example
from routing.config.schema import ApiKeyEntry, GatewayConfig, SecuritySection, check_unique_keys

log = logging.getLogger(__name__)

API_KEYS_ENV = "KVGATE_API_KEYS"
RELOAD_CHECK_S = 1.0  # at most one stat of the keys file per second
_NAMED_HASH = re.compile(r"^([^:]+):([0-9a-fA-F]{64})$")
_KEY_LIST = TypeAdapter(list[ApiKeyEntry])


@dataclass(frozen=True, slots=True)
class Principal:
    """The authenticated caller; admission reads the tier and the per-key limits."""

    name: str
    tier: str
    requests_per_minute: int | None = None
    tokens_per_minute: int | None = None

    @property
    def anonymous(self) -> bool:
        return self is ANONYMOUS


ANONYMOUS = Principal("anonymous", "default")


def hash_key(key: str) -> str:
    """The hex SHA-256 of a key's UTF-8 bytes: what the config stores."""
    return hashlib.sha256(key.encode()).hexdigest()


def matches(presented: str | None, digest: bytes) -> bool:
    """Whether `presented` hashes to `digest`, compared in constant time."""
    if presented is None:
        return False
    return hmac.compare_digest(hashlib.sha256(presented.encode()).digest(), digest)


def env_keys(value: str) -> list[ApiKeyEntry]:
    """`KVGATE_API_KEYS`: comma-separated plaintext keys or `name:sha256` pairs; ValueError
    for a documented example key."""
    out = []
    for i, item in enumerate((v.strip() for v in value.split(",")), start=1):
        if not item:
            continue
        named = _NAMED_HASH.match(item)
        name, sha256 = (named[1], named[2]) if named else (f"env-{i}", hash_key(item))
        try:
            check_not_example(sha256)
        except ValueError as exc:
            raise ValueError(f"{API_KEYS_ENV} key {i} {exc}") from None
        out.append(ApiKeyEntry(name=name, sha256=sha256))
    return out


def load_keys_file(path: str) -> list[ApiKeyEntry]:
    """Parse an api_keys file (a YAML list of entries); ValueError names what is wrong."""
    try:
        raw = yaml.safe_load(Path(path).read_bytes())
    except OSError as exc:
        raise ValueError(f"cannot read {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise ValueError(f"{path}: invalid YAML: {exc}") from None
    try:
        return check_unique_keys(_KEY_LIST.validate_python(raw or []))
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ValueError(f"{path}: {where}: {first['msg']}") from None


class KeyStore:
    """The current client keys; `principal(token)` finds the caller (None: no such key)."""

    def __init__(
        self,
        fixed: list[ApiKeyEntry],
        path: str | None = None,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self._fixed = fixed
        self._path = path
        self._clock = clock
        self._mtime: float | None = None
        self._next_check = 0.0
        self._reload_requested = False
        self._keys: list[tuple[bytes, Principal]] = []
        self._install(self._read_file() if path else [])

    @property
    def enabled(self) -> bool:
        """Keys are required: some key is configured, or a keys file is (even if empty)."""
        return bool(self._fixed) or self._path is not None

    @property
    def reloadable(self) -> bool:
        return self._path is not None

    def request_reload(self) -> None:
        """Re-read the keys file at the next request (SIGHUP). Safe from a signal handler."""
        self._reload_requested = True

    def principal(self, token: str | None) -> Principal | None:
        self._maybe_reload()
        if token is None:
            return None
        presented = hashlib.sha256(token.encode()).digest()
        found = None
        for digest, principal in self._keys:  # every digest: no early exit
            if hmac.compare_digest(presented, digest) and found is None:
                found = principal
        return found

    def _maybe_reload(self) -> None:
        if self._path is None or self._clock is None:
            return
        now = self._clock()
        if now < self._next_check and not self._reload_requested:
            return
        self._next_check = now + RELOAD_CHECK_S
        forced, self._reload_requested = self._reload_requested, False
        try:
            mtime = os.stat(self._path).st_mtime
        except OSError as exc:
            if self._mtime is not None:  # once, not once a second
                log.error(
                    "api keys file %s: %s; keeping the previous keys", self._path, exc.strerror
                )
            self._mtime = None
            return
        if mtime == self._mtime and not forced:
            return
        try:
            self._install(self._read_file())
        except ValueError as exc:
            self._mtime = mtime  # logged once per change, not once a second
            log.error("api keys file: %s; keeping the previous keys", exc)
            return
        log.info("api keys file %s loaded: %d keys", self._path, len(self._keys))

    def _read_file(self) -> list[ApiKeyEntry]:
        assert self._path is not None
        mtime = os.stat(self._path).st_mtime if os.path.exists(self._path) else None
        entries = load_keys_file(self._path)
        self._mtime = mtime
        return entries

    def _install(self, from_file: list[ApiKeyEntry]) -> None:
        entries = check_unique_keys([*self._fixed, *from_file])
        self._keys = [
            (
                bytes.fromhex(e.sha256),
                Principal(e.name, e.tier, e.requests_per_minute, e.tokens_per_minute),
            )
            for e in entries
        ]


def build_key_store(
    section: SecuritySection, environ: Mapping[str, str], clock: Callable[[], float]
) -> KeyStore:
    """The key store from config and environment; ValueError if a source is invalid."""
    fixed = [*section.api_keys, *env_keys(environ.get(API_KEYS_ENV, ""))]
    return KeyStore(fixed, section.api_keys_file, clock)


def authenticate(keys: KeyStore, token: str | None) -> Principal:
    """The caller presenting bearer `token`: ANONYMOUS when no keys are configured, else the
    key's principal; AuthenticationError (401) without a valid key."""
    if not keys.enabled:
        return ANONYMOUS
    principal = keys.principal(token)
    if principal is None:
        if token is None:
            raise AuthenticationError(
                "You didn't provide an API key. Send it as 'Authorization: Bearer <key>'."
            )
        raise AuthenticationError("Incorrect API key provided.")
    return principal


ADMIN_KEY_ENV = "KVGATE_ADMIN_KEY"


@dataclass(frozen=True, slots=True)
class AdminAccess:
    """The admin credential: the SHA-256 digest of the admin key, or None (no key)."""

    digest: bytes | None

    def check(self, token: str | None) -> None:
        if self.digest is not None and not matches(token, self.digest):
            raise AuthenticationError("a valid admin key is required")


def admin_access(config: GatewayConfig, environ: Mapping[str, str]) -> AdminAccess:
    """The admin key from env `KVGATE_ADMIN_KEY` (plaintext) or the config's digest;
    ValueError when the variable holds a documented example key."""
    plain = environ.get(ADMIN_KEY_ENV)
    if plain:
        try:
            check_not_example(hash_key(plain))
        except ValueError as exc:
            raise ValueError(f"{ADMIN_KEY_ENV} {exc}") from None
        return AdminAccess(hashlib.sha256(plain.encode()).digest())
    sha = config.security.admin_key_sha256
    return AdminAccess(bytes.fromhex(sha) if sha else None)
