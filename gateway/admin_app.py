"""The admin listener (`server.admin_port`): `/admin/backends` (state; add, drain, resume,
remove: `gateway.admin_ops`), `/admin/reload`, `/admin/route`, `/metrics`, and FastAPI's
`/docs` and `/openapi.json`, on a port of their own.

The handlers are thin: state and dry runs come from the gateway (`AdminSource`, which the
API port's admin handlers use too), errors are the gateway's OpenAI-shaped ones (FastAPI's
validation errors as 400, Starlette's 404 and 405, and unexpected ones as 500). The admin
key, when configured, is asked for here as well (declared as an HTTP bearer scheme, so the
docs page's Authorize button works); the docs pages themselves describe the API only.

`AdminListener` is a second uvicorn server in the gateway's event loop, started and stopped
by the gateway's lifespan: it binds its own socket (so a busy port fails the start with a
clear error) and never installs signal handlers (the main server owns SIGINT and SIGTERM).
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Awaitable, Callable, Mapping
from typing import Annotated, Any, Literal, Protocol

import orjson
import uvicorn
from fastapi import Depends, FastAPI, Path, Query, Request, Response, Security
from fastapi.exceptions import RequestValidationError
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel
from starlette.exceptions import HTTPException

from gateway import tuning
from gateway.admin_ops import AdminOperations, parse_backend_entry
from gateway.asgi import Receive, Scope, Send, TrackedSend, send_bytes
from gateway.auth import AdminAccess
from gateway.errors import (
    BadRequestError,
    GatewayError,
    MethodNotAllowedError,
    NotFoundError,
    PayloadTooLargeError,
    error_body,
)
from gateway.http.limits import ServerEvents, ServerLimits
from gateway.http.server import server_protocol
from gateway.tuning import TuningBoard
from routing.config.schema import BackendEntry, GatewayConfig, ServerSection, UpstreamSection

log = logging.getLogger(__name__)

_BEARER = HTTPBearer(auto_error=False, description="the admin key (security.admin_key_sha256)")
_DRY_RUN_BODY = {
    "requestBody": {
        "required": True,
        "content": {"application/json": {"schema": {"type": "object"}}},
        "description": "an OpenAI request body (chat, completions, embeddings or responses)",
    }
}


class AdminSource(Protocol):
    """What the admin endpoints read (`gateway.admin_view.AdminView`)."""

    @property
    def config(self) -> GatewayConfig: ...

    @property
    def operations(self) -> AdminOperations: ...

    def backends_state(self) -> dict[str, Any]: ...

    @property
    def tuning(self) -> TuningBoard: ...

    async def metrics_exposition(self) -> bytes: ...

    async def dry_run(
        self, body: bytes, headers: Mapping[str, str], query: bytes
    ) -> dict[str, Any]: ...


def _json(payload: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(payload), status, media_type="application/json")


async def _gateway_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, GatewayError)
    headers = {k.decode(): v.decode() for k, v in exc.headers()}
    return Response(exc.body(), exc.status, headers, media_type="application/json")


async def _invalid_request(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    first = exc.errors()[0]
    where, *path = (str(p) for p in first["loc"])
    name = ".".join(path)
    shown = f"{where} parameter {name}" if where in ("query", "path") and name else name or where
    return await _gateway_error(request, BadRequestError(f"{shown}: {first['msg']}"))


async def _http_error(request: Request, exc: Exception) -> Response:
    """Starlette's own answers (no route, wrong method) as the gateway's errors."""
    assert isinstance(exc, HTTPException)
    method, path = request.method, request.url.path
    if exc.status_code == 404:
        return await _gateway_error(request, NotFoundError(f"no route for {method} {path}"))
    if exc.status_code == 405:
        allow = (exc.headers or {}).get("Allow", "")
        methods = tuple(m.strip() for m in allow.split(",") if m.strip())
        message = f"method {method} not allowed on {path}"
        return await _gateway_error(request, MethodNotAllowedError(message, allow=methods))
    error_type = "invalid_request_error" if exc.status_code < 500 else "internal_error"
    body = error_body(str(exc.detail), error_type, f"http_{exc.status_code}")
    return Response(body, exc.status_code, exc.headers, media_type="application/json")


class _InternalErrors:
    """An unexpected exception: logged, answered with the gateway's OpenAI-shaped 500 (as on
    the API port), the connection kept. Between Starlette's outer error middleware, whose
    500 is text and whose re-raise closes the connection, and the routes."""

    def __init__(self, app: Callable[[Scope, Receive, Send], Awaitable[None]]) -> None:
        self._app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        tracked = TrackedSend(send)
        try:
            await self._app(scope, receive, tracked)
        except Exception:
            log.exception("unhandled error on admin %s %s", scope["method"], scope["path"])
            if tracked.started:
                raise  # too late for an answer: the server drops the connection
            await send_bytes(send, 500, GatewayError("internal gateway error").body())


async def _read_body(request: Request, limit: int) -> bytes:
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise PayloadTooLargeError(f"request body exceeds the limit of {limit} bytes")
    return bytes(body)


def build_admin_app(source: AdminSource, access: AdminAccess) -> FastAPI:
    """The admin API as a FastAPI app over `source`, behind `access`'s key if it has one."""

    async def require_admin(
        cred: Annotated[HTTPAuthorizationCredentials | None, Security(_BEARER)],
    ) -> None:
        access.check(cred.credentials if cred else None)

    app = FastAPI(
        title="kvgate admin",
        description="Backend state and changes (add, drain, resume, remove), config reload, "
        "dry-run routing and Prometheus metrics of a kvgate gateway. Changes last until the "
        "process ends; the config file is not written.",
        dependencies=[Depends(require_admin)] if access.digest is not None else [],
    )
    app.add_exception_handler(GatewayError, _gateway_error)
    app.add_exception_handler(RequestValidationError, _invalid_request)  # not FastAPI's 422
    app.add_exception_handler(HTTPException, _http_error)  # not {"detail": ...}
    app.add_middleware(_InternalErrors)

    @app.get("/admin/backends", summary="Every backend's health, load, metrics and cache state")
    async def backends() -> Response:
        return _json(source.backends_state())

    add_backend_routes(app, source)

    @app.post(
        "/admin/route",
        summary="Route a request body without forwarding it; every backend's scores",
        openapi_extra=_DRY_RUN_BODY,
    )
    async def route(
        request: Request,
        api: Annotated[
            Literal["chat", "completions", "embeddings", "responses"] | None,
            Query(description="the API of the body (default: guessed from its fields)"),
        ] = None,
        policy: Annotated[str | None, Query(description="a routing profile to use")] = None,
    ) -> Response:
        body = await _read_body(request, source.config.server.max_body_bytes)
        headers = {k.lower(): v for k, v in request.headers.items()}
        return _json(await source.dry_run(body, headers, request.url.query.encode("latin-1")))

    @app.get(tuning.TUNING, summary="The self-tuning loop: mode, live profile, proposal, switches")
    async def tuning_state() -> Response:
        return _json(source.tuning.state())

    @app.post(tuning.PROPOSAL, summary="The tuner reports a proposal (shown, not applied)")
    async def tuning_proposal(request: Request) -> Response:
        body = await _read_body(request, source.config.server.max_body_bytes)
        return _json(source.tuning.post(tuning.PROPOSAL, body))

    @app.post(tuning.SWITCH, summary="The tuner switches the live profile (mode apply only)")
    async def tuning_switch(request: Request) -> Response:
        body = await _read_body(request, source.config.server.max_body_bytes)
        return _json(source.tuning.post(tuning.SWITCH, body))

    @app.get("/metrics", summary="Prometheus exposition of the gateway's metrics")
    async def metrics() -> Response:
        from prometheus_client import CONTENT_TYPE_LATEST

        return Response(await source.metrics_exposition(), media_type=CONTENT_TYPE_LATEST)

    return app


_BackendId = Annotated[str, Path(description="the backend's id, as /admin/backends lists it")]


def _inline_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The model's JSON schema with its `$defs` put in place (an operation's schema cannot
    point at a `$defs` of its own)."""
    schema = model.model_json_schema()
    defs = schema.pop("$defs", {})

    def inline(node: Any) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref", "")
            if ref.startswith("#/$defs/"):
                return inline(defs[ref.removeprefix("#/$defs/")])
            return {k: inline(v) for k, v in node.items()}
        return [inline(v) for v in node] if isinstance(node, list) else node

    return dict(inline(schema))


_ENTRY_BODY = {
    "requestBody": {
        "required": True,
        "content": {"application/json": {"schema": _inline_schema(BackendEntry)}},
        "description": "a `backends:` entry of the config file, as JSON",
    }
}


def add_backend_routes(app: FastAPI, source: AdminSource) -> None:
    """The write endpoints (`gateway.admin_ops` has the table of what each does)."""
    ops = source.operations

    # The body is read and checked as on the API port (same limit, same errors), not by
    # FastAPI's model binding; `_ENTRY_BODY` documents it.
    @app.post(
        "/admin/backends",
        status_code=201,
        summary="Add a backend (a `backends:` entry); 409 if its id is taken",
        openapi_extra=_ENTRY_BODY,
    )
    async def add(request: Request) -> Response:
        body = await _read_body(request, source.config.server.max_body_bytes)
        entry = parse_backend_entry(body, request.headers.get("content-type"))
        return _json(await ops.add(entry), 201)

    @app.post(
        "/admin/backends/{backend_id:path}/drain",
        summary="Route no new requests to a backend; those in flight finish",
    )
    async def drain(
        backend_id: _BackendId,
        remove: Annotated[
            bool, Query(description="remove the backend once its last request has ended")
        ] = False,
    ) -> Response:
        return _json(await ops.drain(backend_id, remove=remove))

    @app.post("/admin/backends/{backend_id:path}/resume", summary="Put a drained backend back")
    async def resume(backend_id: _BackendId) -> Response:
        return _json(await ops.resume(backend_id))

    @app.delete(
        "/admin/backends/{backend_id:path}",
        summary="Remove a backend: at once if idle (200), else drained first (202)",
    )
    async def remove(
        backend_id: _BackendId,
        force: Annotated[
            bool, Query(description="remove it now; its requests in flight still finish")
        ] = False,
    ) -> Response:
        status, body = await ops.remove(backend_id, force=force)
        return _json(body, status)

    @app.post("/admin/reload", summary="Reload the config file (as SIGHUP); 400 if it is bad")
    async def reload() -> Response:
        return _json(await ops.reload())


class AdminListener:
    """The admin app under its own uvicorn server, in the caller's event loop."""

    def __init__(
        self,
        app: FastAPI,
        host: str,
        port: int,
        server: ServerSection | None = None,
        *,
        reuse_port: bool = False,
        upstream: UpstreamSection | None = None,
    ) -> None:
        server = server or ServerSection()
        self._reuse_port = reuse_port  # the workers of `serve --workers N` share the port
        self._config = uvicorn.Config(
            app,
            host=host,
            port=port,
            # The API port's limits (head/body/idle timeouts, header caps, connection cap).
            http=server_protocol(ServerLimits.from_config(server, upstream), ServerEvents()),
            lifespan="off",
            access_log=False,
            server_header=False,
            log_config=None,
            timeout_graceful_shutdown=2,
        )
        self._server = uvicorn.Server(self._config)
        self._socket: socket.socket | None = None

    @property
    def port(self) -> int:
        """The port bound (the real one when the config said 0)."""
        if self._socket is None:
            raise RuntimeError("admin listener not started")
        return int(self._socket.getsockname()[1])

    async def start(self) -> None:
        """Bind and serve; OSError if the address cannot be bound."""
        self._socket = _bind(self._config.host, self._config.port, self._reuse_port)
        self._config.load()
        self._server.lifespan = self._config.lifespan_class(self._config)
        await self._server.startup(sockets=[self._socket])
        host = self._config.host
        log.info("admin listener on http://%s:%d (/admin/*, /metrics, /docs)", host, self.port)

    async def stop(self) -> None:
        if self._socket is None:
            return
        await self._server.shutdown(sockets=[self._socket])
        self._socket = None


def _bind(host: str, port: int, reuse_port: bool = False) -> socket.socket:
    family, *_ = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    sock = socket.create_server((host, port), family=family, reuse_port=reuse_port)
    return sock


def admin_listener(
    source: AdminSource, access: AdminAccess, port: int, *, reuse_port: bool = False
) -> AdminListener:
    """The listener to run alongside the API port (`server.admin_port`, `admin_host`);
    `reuse_port`: bound with SO_REUSEPORT, as every worker of `serve --workers N` binds it."""
    config = source.config
    server = config.server
    host = server.admin_host or server.host
    app = build_admin_app(source, access)
    return AdminListener(app, host, port, server, reuse_port=reuse_port, upstream=config.upstream)
