"""The front door's ASGI app: dispatches each HTTP request to its handler, and runs the
runtime's services for the server's lifespan.

Routes: the inference endpoints (OpenAI's, SGLang's native ones, vLLM's utility ones:
`gateway.inference`; with `GET`/`DELETE /v1/responses/{id}` and `POST .../cancel`), `/health`,
`/ready`, `/metrics`, `/v1/models`, and the admin API on the API port (`gateway.admin_ops`;
behind the admin key, or on `server.admin_port` instead: `gateway.admin_app`, which alone serves
the OpenAPI page `/docs`). Every request gets its `RequestRecord` (`Director.start`) before
`AccessControl.admit`, so a refused one ends in `Director.finish` (metrics, access log) like
the rest; probes and scrapes (`QUIET_PATHS`) only when refused. `build_app(config)` builds
the runtime and the app.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from prometheus_client import CONTENT_TYPE_LATEST

from gateway import admin_ops, tuning
from gateway.access_log import clip, request_id_var
from gateway.admin_view import AdminView
from gateway.admission.identity import header_tenant
from gateway.asgi import (
    Receive,
    Scope,
    Send,
    TrackedSend,
    header_map,
    read_body,
    send_bytes,
    send_json,
)
from gateway.auth import ANONYMOUS, Principal
from gateway.compose import build_runtime
from gateway.errors import (
    ClientDisconnectedError,
    GatewayError,
    MethodNotAllowedError,
    NotFoundError,
)
from gateway.header_policy import client_address
from gateway.http.client import UpstreamClient
from gateway.http.hygiene import allowed_methods, check_host, refuse_websocket
from gateway.inference import InferenceHandler, send_error
from gateway.inference_request import API_BY_PATH, ERROR_SHAPES
from gateway.lifecycle import Drain
from gateway.proxy import BrokenBodyError, Proxy
from gateway.request_record import RequestRecord
from gateway.responses.ids import object_path
from gateway.runtime import Runtime
from gateway.services import Services
from gateway.upstream import first_byte_timeouts, make_client, make_retry_budget
from routing.config.schema import GatewayConfig

if TYPE_CHECKING:
    from gateway.access_control import Listener
    from gateway.workers.context import WorkerContext

log = logging.getLogger(__name__)
Handler = Callable[[Scope, Receive, TrackedSend, RequestRecord], Awaitable[None]]
# Kubelets' probes and Prometheus' scrapes: no access-log line, metric or trace unless refused.
QUIET_PATHS = frozenset({"/health", "/ready", "/metrics"})


class GatewayApp:
    """The ASGI callable. Create with `build_app`; serve with uvicorn (lifespan on)."""

    def __init__(self, runtime: Runtime, *, reuse_port: bool = False) -> None:
        self.runtime = runtime
        self.services = Services(runtime, on_down=self._abandon_heads)
        self.admin = AdminView(runtime)
        self.drain = Drain()  # started by the server on SIGTERM (gateway.lifecycle)
        self.inference = InferenceHandler(runtime, self.drain)
        self._client: UpstreamClient | None = None  # while running
        self._routes: dict[tuple[str, str], Handler] = {
            ("GET", "/health"): self._health,
            ("GET", "/ready"): self._ready,
            ("GET", "/metrics"): self._metrics,
            ("GET", "/v1/models"): self._models,
            ("GET", "/admin/backends"): self._admin_backends,
            ("POST", "/admin/route"): self._admin_route,
            ("POST", admin_ops.BACKENDS): self._admin_write,
            ("POST", admin_ops.RELOAD): self._admin_write,
            ("GET", tuning.TUNING): self._admin_tuning,
            ("POST", tuning.PROPOSAL): self._admin_tuning,
            ("POST", tuning.SWITCH): self._admin_tuning,
        }
        for path in API_BY_PATH:
            self._routes[("POST", path)] = self.inference
        self._allow = allowed_methods(self._routes)
        self.reuse_port = reuse_port  # a worker of `serve --workers N`: admin port shared

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            await self._http(scope, receive, TrackedSend(self.drain.send_for(send)))
        elif scope["type"] == "lifespan":
            await self._lifespan(receive, send)
        elif scope["type"] == "websocket":
            await refuse_websocket(receive, send)

    # -- lifespan -------------------------------------------------------------------------
    async def _lifespan(self, receive: Receive, send: Send) -> None:
        rt = self.runtime
        await receive()  # lifespan.startup
        try:
            await self._start()
            reload = rt.reloader.request if rt.reloader is not None else None
            await rt.access.open(self._admin_listener(), on_sighup=reload)  # admin port, SIGHUP
        except Exception as exc:  # report start-up failure to the server, which exits
            log.exception("start-up failed")
            await send({"type": "lifespan.startup.failed", "message": str(exc)})
            return
        async with asyncio.TaskGroup() as tg:
            loops = tg.create_task(self.services.loops().run(), name="loops")
            if rt.peers is not None:  # a worker serves once its siblings hear it
                await rt.peers.join()
            await send({"type": "lifespan.startup.complete"})
            await receive()  # lifespan.shutdown
            await rt.access.close()
            loops.cancel()
        await self.services.stop()
        if self._client is not None:
            await self._client.aclose()
        self._client = self.inference.proxy = None
        await send({"type": "lifespan.shutdown.complete"})

    async def _start(self) -> None:
        rt = self.runtime
        cfg = rt.config
        await self.services.start()
        client = self._client = make_client(cfg.upstream)
        self.inference.proxy = Proxy(
            rt.director,
            client,
            max_attempts=cfg.upstream.max_attempts,
            count_output=rt.recorder is not None,
            first_byte=first_byte_timeouts(cfg.upstream),
            budget=make_retry_budget(cfg.upstream, rt.clock),
            headers=rt.access.headers,
        )
        log.info(
            "kvgate ready: %d/%d backends healthy, policy %s",
            len(rt.pool.healthy()),
            len(rt.pool),
            rt.scheduler.default_profile,
        )

    def _admin_listener(self) -> Listener | None:
        port = self.runtime.config.server.admin_port
        if port is None:
            return None
        from gateway.admin_app import admin_listener  # FastAPI is imported only if used

        access = self.runtime.access.admin
        return admin_listener(self.admin, access, port, reuse_port=self.reuse_port)

    def _abandon_heads(self, backend_id: str) -> None:
        """Requests still waiting for a down backend's response head fail over now instead
        of waiting out `read_timeout_s`."""
        backend = self.runtime.pool.find(backend_id)
        if self._client is not None and backend is not None:
            n = self._client.abandon_heads(backend.spec.url, "backend declared down")
            if n:
                log.warning("backend %s down: %d request(s) waiting on it fail over", backend_id, n)

    # -- dispatch -------------------------------------------------------------------------
    async def _http(self, scope: Scope, receive: Receive, send: TrackedSend) -> None:
        path, method = scope["path"], scope["method"]
        handler = self._routes.get((method, path))
        if handler is None and path.startswith(admin_ops.BACKENDS + "/"):
            handler = self._admin_write  # /admin/backends/{id}[/drain|/resume]
        elif handler is None and object_path(path) is not None:
            handler = self.inference.stored  # /v1/responses/{id}[/cancel]
        director, quiet = self.runtime.director, path in QUIET_PATHS
        headers = header_map(scope)
        rec = director.start(
            method, path, headers,
            client=client_address(scope), scheme=scope.get("scheme", "http"), traced=not quiet,
        )  # fmt: skip
        token = request_id_var.set(rec.request_id)
        try:
            check_host(scope)
            principal = scope["kvgate.principal"] = self.runtime.access.admit(scope)  # 401 first
            self._identify(rec, principal, headers)
            if handler is None:
                if path in self._allow:
                    allow = self._allow[path]
                    raise MethodNotAllowedError(
                        f"method {method} not allowed on {path}", allow=allow
                    )
                raise NotFoundError(f"no route for {method} {path}")
            await handler(scope, receive, send, rec)
        except GatewayError as exc:
            rec.status, rec.error = exc.status, exc.message
            rec.client_gone = isinstance(exc, ClientDisconnectedError)
            extra = [(b"x-request-id", rec.request_id.encode())]
            await send_error(send, exc, extra, shape=ERROR_SHAPES.get(path, "openai"))
        except BrokenBodyError:
            pass  # returning with the response unfinished makes the server drop the connection
        except Exception:
            log.exception("unhandled error on %s %s", method, clip(path))
            rec.error = "internal gateway error"
            extra = [(b"x-request-id", rec.request_id.encode())]
            await send_error(send, GatewayError(rec.error), extra)
        finally:
            if send.status:
                rec.status = send.status  # what the client got
            if not quiet or rec.error is not None:
                director.finish(rec)
            request_id_var.reset(token)

    def _identify(self, rec: RequestRecord, principal: Principal, headers: dict[str, str]) -> None:
        """Who the request is for, as the access log and the token counters name it: the API
        key's name, else the tenant the admission header names."""
        if principal is not ANONYMOUS:
            rec.key = rec.tenant = principal.name
        else:
            rec.tenant = header_tenant(headers, self.runtime.config.admission.tenant_header)

    # -- small endpoints ------------------------------------------------------------------
    async def _health(
        self, scope: Scope, receive: Receive, send: TrackedSend, rec: RequestRecord
    ) -> None:
        await send_json(send, 200, {"status": "ok"})

    async def _ready(
        self, scope: Scope, receive: Receive, send: TrackedSend, rec: RequestRecord
    ) -> None:
        rt = self.runtime
        healthy = len(rt.pool.healthy())
        draining = self.drain.draining
        ok = healthy > 0 and self._client is not None and self.services.ready() and not draining
        loops = rt.loops.states() if rt.loops else {}
        body: dict[str, Any] = {
            "ready": ok,
            "healthy_backends": healthy,
            "backends": len(rt.pool),
        }
        state = rt.shared.state()  # shared routing state: degraded while Redis fails
        body |= {"loops": loops, "draining": draining, "state": state}
        if rt.peers is not None:
            body["worker"] = rt.peers.state()
        await send_json(send, 200 if ok else 503, body)

    async def _metrics(
        self, scope: Scope, receive: Receive, send: TrackedSend, rec: RequestRecord
    ) -> None:
        page = await self.runtime.metrics_exposition()
        await send_bytes(send, 200, page, CONTENT_TYPE_LATEST.encode())

    async def _models(
        self, scope: Scope, receive: Receive, send: TrackedSend, rec: RequestRecord
    ) -> None:
        cards = self.runtime.pool.served_models()
        await send_json(send, 200, {"object": "list", "data": list(cards.values())})

    async def _admin_backends(
        self, scope: Scope, receive: Receive, send: TrackedSend, rec: RequestRecord
    ) -> None:
        await send_json(send, 200, self.admin.backends_state())

    async def _admin_write(
        self, scope: Scope, receive: Receive, send: TrackedSend, rec: RequestRecord
    ) -> None:
        rt = self.runtime
        await admin_ops.handle(rt.operations, scope, receive, send, rt.config.server.max_body_bytes)

    async def _admin_tuning(
        self, scope: Scope, receive: Receive, send: TrackedSend, rec: RequestRecord
    ) -> None:
        board = self.runtime.tuning
        if scope["method"] == "GET":
            await send_json(send, 200, board.state())
            return
        body = await read_body(receive, self.runtime.config.server.max_body_bytes)
        await send_json(send, 200, board.post(scope["path"], body))

    async def _admin_route(
        self, scope: Scope, receive: Receive, send: TrackedSend, rec: RequestRecord
    ) -> None:
        body = await read_body(receive, self.runtime.config.server.max_body_bytes)
        answer = await self.admin.dry_run(body, header_map(scope), scope["query_string"])
        await send_json(send, 200, answer)


def build_app(config: GatewayConfig, workers: WorkerContext | None = None) -> GatewayApp:
    """The front door for a validated config (`workers`: as worker of `kvgate serve
    --workers N`); a `ConfigError` if it cannot be built (`build_runtime`)."""
    return GatewayApp(build_runtime(config, workers=workers), reuse_port=workers is not None)
