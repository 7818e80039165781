"""A minimal Kubernetes API client: list and watch one resource over httpx.

Where the API is (first match):
1. an explicit URL (`--kube-api`, config `discovery.kube_api`): plain, no credentials (tests,
   or `kubectl proxy`);
2. in a pod (`KUBERNETES_SERVICE_HOST`/`_PORT` set): the service account's token and CA from
   /var/run/secrets/kubernetes.io/serviceaccount (the token is re-read per request: the
   kubelet rotates it);
3. `$KUBECONFIG` or ~/.kube/config: the current context's server, CA and bearer token or
   client certificate (exec/auth-provider plugins are not supported).

The protocol (https://kubernetes.io/docs/reference/using-api/api-concepts/): a list answers
`{items, metadata.resourceVersion}`; a watch from that version streams one JSON event per
line, `{"type": ADDED|MODIFIED|DELETED|BOOKMARK|ERROR, "object": ...}`, and a version too old
answers 410 Gone (as the HTTP status or as an ERROR event whose Status has code 410).
"""

from __future__ import annotations

import base64
import os
import ssl
import tempfile
from collections.abc import AsyncGenerator, Generator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import orjson
import yaml

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")


class KubeAPIError(Exception):
    """The API answered an error, or could not be reached."""

    def __init__(self, message: str, status: int = 0) -> None:
        super().__init__(message)
        self.status = status


class GoneError(KubeAPIError):
    """410 Gone: the resource version is too old to watch from; list again."""


@dataclass(frozen=True, slots=True)
class KubeConnection:
    """Where the API server is and how to authenticate to it."""

    server: str
    token: str | None = None
    token_file: Path | None = None
    ca_file: str | None = None
    client_cert: tuple[str, str] | None = None  # (certificate file, key file)
    insecure: bool = False

    def ssl_context(self) -> ssl.SSLContext | bool:
        if not self.server.startswith("https://"):
            return False
        if self.insecure:
            return False
        ctx = ssl.create_default_context(cafile=self.ca_file)
        if self.client_cert is not None:
            ctx.load_cert_chain(*self.client_cert)
        return ctx


def resolve_connection(
    explicit_url: str | None,
    env: Mapping[str, str] = os.environ,
    sa_dir: Path = SERVICE_ACCOUNT_DIR,
) -> KubeConnection:
    """The API to talk to, by the rules in this module's docstring."""
    if explicit_url:
        return KubeConnection(server=explicit_url.rstrip("/"))
    host, port = env.get("KUBERNETES_SERVICE_HOST"), env.get("KUBERNETES_SERVICE_PORT")
    if host and port:
        host = f"[{host}]" if ":" in host else host
        if not (sa_dir / "token").is_file():
            raise KubeAPIError(
                f"in a pod but no service account token at {sa_dir / 'token'} "
                "(automountServiceAccountToken: false?)"
            )
        return KubeConnection(
            server=f"https://{host}:{port}",
            token_file=sa_dir / "token",
            ca_file=str(sa_dir / "ca.crt"),
        )
    home = env.get("HOME") or str(Path.home())
    path = env.get("KUBECONFIG", "").split(os.pathsep)[0] or str(Path(home) / ".kube/config")
    if Path(path).is_file():
        return from_kubeconfig(Path(path))
    raise KubeAPIError(
        "no Kubernetes API: not in a pod, no kubeconfig; give --kube-api URL or set KUBECONFIG"
    )


def from_kubeconfig(path: Path) -> KubeConnection:
    doc = yaml.safe_load(path.read_bytes()) or {}
    context_name = doc.get("current-context")
    context = _named(doc.get("contexts"), context_name, "context", path)
    cluster = _named(doc.get("clusters"), context.get("cluster"), "cluster", path)
    user = _named(doc.get("users"), context.get("user"), "user", path, required=False)
    base = path.parent
    ca = _file_or_data(cluster, "certificate-authority", base)
    cert = _file_or_data(user, "client-certificate", base)
    key = _file_or_data(user, "client-key", base)
    return KubeConnection(
        server=str(cluster["server"]).rstrip("/"),
        token=user.get("token"),
        ca_file=ca,
        client_cert=(cert, key) if cert and key else None,
        insecure=bool(cluster.get("insecure-skip-tls-verify")),
    )


def _named(entries: Any, name: Any, kind: str, path: Path, required: bool = True) -> dict[str, Any]:
    for entry in entries or []:
        if entry.get("name") == name:
            return dict(entry.get(kind) or {})
    if required:
        raise KubeAPIError(f"{path}: no {kind} named {name!r}")
    return {}


def _file_or_data(section: Mapping[str, Any], key: str, base: Path) -> str | None:
    if section.get(key):
        return str(base / section[key])
    data = section.get(f"{key}-data")
    if not data:
        return None
    # ssl wants files: write the inline PEM once to a private temporary file.
    with tempfile.NamedTemporaryFile("wb", suffix=".pem", delete=False) as out:
        out.write(base64.b64decode(data))
    return out.name


class _BearerAuth(httpx.Auth):
    def __init__(self, conn: KubeConnection) -> None:
        self._conn = conn

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        token = self._conn.token
        if self._conn.token_file is not None:
            try:
                token = self._conn.token_file.read_text().strip()
            except OSError as exc:
                raise KubeAPIError(f"cannot read the service account token: {exc}") from exc
        if token:
            request.headers["Authorization"] = f"Bearer {token}"
        yield request


@dataclass(frozen=True, slots=True)
class WatchEvent:
    type: str  # ADDED | MODIFIED | DELETED | BOOKMARK
    object: Mapping[str, Any]


class KubeClient:
    """List and watch over one httpx client; `aclose` when done."""

    def __init__(self, conn: KubeConnection, connect_timeout_s: float = 5.0) -> None:
        self._client = httpx.AsyncClient(
            base_url=conn.server,
            auth=_BearerAuth(conn),
            verify=conn.ssl_context(),
            timeout=httpx.Timeout(30.0, connect=connect_timeout_s),
            headers={"Accept": "application/json"},
        )

    async def aclose(self) -> None:
        await self._client.aclose()

    async def list(
        self, path: str, params: Mapping[str, str]
    ) -> tuple[list[Mapping[str, Any]], str]:
        """The items at `path` and the list's resourceVersion."""
        try:
            resp = await self._client.get(path, params=dict(params))
        except httpx.HTTPError as exc:
            raise KubeAPIError(f"GET {path}: {exc!r}") from exc
        _raise_for_status(resp, path)
        try:
            body = orjson.loads(resp.content)
            return list(body.get("items") or []), str(body["metadata"]["resourceVersion"])
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise KubeAPIError(f"GET {path}: not a list: {exc!r}") from exc

    async def watch(
        self, path: str, params: Mapping[str, str], resource_version: str, timeout_s: int
    ) -> AsyncGenerator[WatchEvent, None]:
        """Events after `resource_version` until the server ends the watch (about
        `timeout_s`); GoneError when the version is too old."""
        query = {
            **params,
            "watch": "1",
            "resourceVersion": resource_version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(timeout_s),
        }
        # The read timeout outlasts the server's own end of the watch.
        timeout = httpx.Timeout(timeout_s + 30.0, connect=self._client.timeout.connect)
        try:
            async with self._client.stream("GET", path, params=query, timeout=timeout) as resp:
                if resp.status_code >= 400:
                    await resp.aread()
                    _raise_for_status(resp, path)
                async for line in resp.aiter_lines():
                    if line.strip():
                        yield _parse_event(line, path)
        except httpx.HTTPError as exc:
            raise KubeAPIError(f"watch {path}: {exc!r}") from exc


def _parse_event(line: str, path: str) -> WatchEvent:
    try:
        event = orjson.loads(line)
        kind, obj = event.get("type"), event.get("object") or {}
    except (ValueError, AttributeError) as exc:
        raise KubeAPIError(f"watch {path}: not an event: {line[:200]!r}") from exc
    if kind == "ERROR":
        code = int(obj.get("code") or 0)
        error = GoneError if code == 410 else KubeAPIError
        raise error(f"watch {path}: {obj.get('message', obj)}", code)
    return WatchEvent(str(kind), obj)


def _raise_for_status(resp: httpx.Response, path: str) -> None:
    if resp.status_code < 400:
        return
    error = GoneError if resp.status_code == 410 else KubeAPIError
    raise error(f"{path}: {resp.status_code} {resp.text[:200]}", resp.status_code)
