"""The kvgate ASGI application: composition root, request dispatch and lifespan.

`build_app(config)` wires pool, scheduler, proxy and metrics from a validated config. The app
is plain ASGI: a dict of routes, one error renderer, and a lifespan that owns the upstream
clients and the background loops (supervised: `gateway.supervisor`; cancelled on shutdown).
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs

from prometheus_client import CONTENT_TYPE_LATEST

from adapters.kv_events import KvEventBatch
from gateway import admin, admin_ops
from gateway.access_log import clip, log_request, request_id_from, request_id_var
from gateway.admin_state import backends_state, register_scrape_collectors
from gateway.admission import build_admission
from gateway.asgi import (
    Receive,
    Scope,
    Send,
    TrackedSend,
    check_json_content_type,
    disconnect_signal,
    header_map,
    read_body,
    run_until_disconnect,
    send_bytes,
    send_json,
)
from gateway.config_reload import ConfigReloader, LiveConfig
from gateway.errors import (
    ClientDisconnectedError,
    GatewayError,
    MethodNotAllowedError,
    NoHealthyBackendError,
    NotFoundError,
    PayloadTooLargeError,
)
from gateway.front_door import FrontDoor
from gateway.header_policy import client_address
from gateway.health_settings import health_policy, probe_readmit_s, probe_settings, scrape_settings
from gateway.http.client import ClientLimits, UpstreamClient
from gateway.http.fetcher import CappedFetcher
from gateway.http.hygiene import allowed_methods, check_host, refuse_websocket
from gateway.inference_request import API_BY_PATH, InferenceRequest, parse_inference_body
from gateway.kv_event_loops import KvEventLoops
from gateway.lifecycle import Drain
from gateway.metrics import GatewayMetrics
from gateway.pod_backends import PodBackends
from gateway.prefix import PrefixTracker
from gateway.proxy import BrokenBodyError, Proxy, RequestRecord
from gateway.recorder import recorder_for
from gateway.router import RequestRouter
from gateway.runtime_backends import RuntimeBackends, backend_spec, kv_settings
from gateway.sharing import build_sharing
from gateway.state.collector import SharedStateCollector
from gateway.supervisor import Supervisor
from gateway.tokens import build_tokenizers, healthy_backend_picker
from gateway.tracing.setup import build_tracing
from gateway.tracing.spans import Outcome
from gateway.upstream import first_byte_timeouts, make_client, make_retry_budget
from gateway.workers.peers import SIBLINGS_LOOP
from health.discovery.kube_api import KubeConnection, resolve_connection
from health.pool import BackendPool
from health.prober import Prober
from health.scraper import Scraper
from routing.config.schema import ConfigError, GatewayConfig
from routing.registry import PluginError
from scoring.stack import build_routing_stack, build_scheduler

if TYPE_CHECKING:
    from gateway.workers.context import WorkerContext

log = logging.getLogger(__name__)
PROBE_LOOP = "health-probes"  # while it is not running, the gateway is not ready
Handler = Callable[[Scope, Receive, TrackedSend], Awaitable[None]]


@dataclass(slots=True)
class HealthRuntime:
    """The background health work: active probes and metric scrapes, run by their owner."""

    probe_client: CappedFetcher
    prober: Prober
    scraper: Scraper


@dataclass(slots=True)
class _Runtime:
    client: UpstreamClient
    proxy: Proxy
    health: HealthRuntime


class GatewayApp:
    """The ASGI callable. Create with `build_app`; serve with uvicorn (lifespan on)."""

    def __init__(
        self,
        config: GatewayConfig,
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
        workers: WorkerContext | None = None,
    ):
        self.config = config
        self.clock = clock
        rng = rng or random.Random()
        stack = build_routing_stack(config.routing, clock, rng)
        self.prefix_index, self.ttft_model = stack.index, stack.ttft_model
        self.scheduler = stack.scheduler
        h = config.health
        self.pool = BackendPool(
            map(backend_spec, config.backends),
            health_policy(h),
            clock,
            stale_after_s=h.metrics_stale_after_s,
        )
        self.metrics = GatewayMetrics(models=self.pool.known_models)
        # Each engine's KV-cache events keep the precise index exact for that backend.
        self.precise_index = stack.precise
        # Configured publishers now; discovered pods' and runtime backends' join and leave.
        self.kv_loops = KvEventLoops({}, self.precise_index, self._apply_kv_batch)
        self.kv_events = self.kv_loops.subscribers
        for entry in config.backends:
            if (settings := kv_settings(entry)) is not None:
                self.kv_loops.follow(backend_spec(entry).id, settings)
        self.prefix = PrefixTracker(stack.feed, stack.precise)
        # Exact prompt token ids for the precise index (a bad local path fails the start).
        self.tokenizers = build_tokenizers(config.tokenizers, healthy_backend_picker(self.pool))
        register_scrape_collectors(self, stack, config.discovery.pool or "default")
        # Routing state shared with other gateways (`state:`) or sibling workers (--workers).
        self.shared, self.peers = build_sharing(
            config,
            stack,
            self.pool,
            self.prefix,
            workers=workers,
            own_metrics=self.metrics_page,
            apply_admin=lambda op: self.operations.apply(op),  # noqa: PLW0108 (built below)
            clock=clock,
        )
        self.metrics.registry.register(SharedStateCollector(self.shared))
        readmit = probe_readmit_s(h)
        self.router = RequestRouter(self.pool, self.scheduler, config.routing, self.prefix, readmit)
        self.recorder = recorder_for(config, clock)
        self.pod_backends = PodBackends(self.pool, self._backend_removed, self.kv_loops)
        # Backends the admin API and config reloads add, drain and remove (discovery's: its).
        self.backends = RuntimeBackends(
            self.pool, self.kv_loops, self._backend_removed, config.backends, self.pod_backends.owns
        )
        self.live = LiveConfig(
            config,
            self.backends,
            self.router,
            self.pool,
            lambda section: build_scheduler(section, stack.registry, clock, rng),
        )
        # Set by the command line (`ConfigReloader(load, app.reconfigure, ...)`) before start.
        self.reloader: ConfigReloader | None = None
        self.operations = admin_ops.AdminOperations(
            self.backends, lambda: self.reloader, self.peers.repeat if self.peers else None
        )
        self.front_door = FrontDoor(config, os.environ, clock, self.metrics.count_auth_refused)
        # OTEL_TRACES_EXPORTER=otlp: spans per request (`gateway.tracing`); None: off, free.
        self.tracing = build_tracing(os.environ)
        self.tracer = self.tracing.tracer if self.tracing is not None else None
        self.front_door.reuse_port = workers is not None
        self.admission = build_admission(
            config, self.pool, self.scheduler, clock, self.metrics.registry
        )
        self._kube: KubeConnection | None = None
        self._runtime: _Runtime | None = None
        self.loops: Supervisor | None = None
        self._routes: dict[tuple[str, str], Handler] = {
            ("GET", "/health"): self._health,
            ("GET", "/ready"): self._ready,
            ("GET", "/metrics"): self._metrics,
            ("GET", "/v1/models"): self._models,
            ("GET", "/admin/backends"): self._admin_backends,
            ("POST", "/admin/route"): self._admin_route,
            ("POST", admin_ops.BACKENDS): self._admin_write,
            ("POST", admin_ops.RELOAD): self._admin_write,
        }
        for path in API_BY_PATH:
            self._routes[("POST", path)] = self._inference
        self._allow = allowed_methods(self._routes)
        self.drain = Drain()  # started by the server on SIGTERM (gateway.lifecycle)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            await self._http(scope, receive, TrackedSend(self.drain.send_for(send)))
        elif scope["type"] == "lifespan":
            await self._lifespan(receive, send)
        elif scope["type"] == "websocket":
            await refuse_websocket(receive, send)

    # -- lifespan -------------------------------------------------------------------------
    async def _lifespan(self, receive: Receive, send: Send) -> None:
        await receive()  # lifespan.startup
        try:
            runtime = await self._start()
            reload = self.reloader.request if self.reloader is not None else None
            await self.front_door.open(self, on_sighup=reload)  # the admin port, SIGHUP
        except Exception as exc:  # report start-up failure to the server, which exits
            log.exception("start-up failed")
            await send({"type": "lifespan.startup.failed", "message": str(exc)})
            return
        async with asyncio.TaskGroup() as tg:
            loops = tg.create_task(self.background_loops(runtime.health).run(), name="loops")
            if self.peers is not None:  # a worker serves once its siblings hear it
                await self.peers.join()
            await send({"type": "lifespan.startup.complete"})
            await receive()  # lifespan.shutdown
            await self.front_door.close()
            loops.cancel()
        if self.recorder is not None:
            self.recorder.close()  # the lines of the last second
        await self.stop_tracing()
        await runtime.client.aclose()
        await runtime.health.probe_client.aclose()
        await self.tokenizers.aclose()
        await self.shared.aclose()
        self._runtime = None
        await send({"type": "lifespan.shutdown.complete"})

    async def _start(self) -> _Runtime:
        if self.recorder is not None:
            self.recorder.open()  # an unwritable path fails the start-up
        client = make_client(self.config.upstream)
        health = await self.start_health()
        proxy = Proxy(
            self.pool,
            client,
            self.metrics,
            self.clock,
            max_attempts=self.config.upstream.max_attempts,
            prefix=self.prefix,
            count_output=self.recorder is not None,
            first_byte=first_byte_timeouts(self.config.upstream),
            budget=make_retry_budget(self.config.upstream, self.clock),
            headers=self.front_door.headers,
        )
        self._runtime = _Runtime(client, proxy, health)
        healthy = len(self.pool.healthy())
        log.info(
            "kvgate ready: %d/%d backends healthy, policy %s",
            healthy,
            len(self.pool),
            self.scheduler.default_profile,
        )
        return self._runtime

    async def start_health(self) -> HealthRuntime:
        """A first probe round and metric scrape; the caller runs `background_loops()` and
        closes `probe_client` (the front door here, `kvgate epp` too)."""
        if self.config.discovery.pool:  # nowhere to find the Kubernetes API fails it too
            self._kube = resolve_connection(self.config.discovery.kube_api)
        h = self.config.health
        probe_limits = ClientLimits(
            connect_timeout=h.probe_timeout_s,
            read_timeout=h.probe_timeout_s,
            write_timeout=h.probe_timeout_s,
            pool_timeout=h.probe_timeout_s,
            max_connections=64,
            max_keepalive=64,
            keepalive_expiry=self.config.upstream.keepalive_expiry_s,
        )
        probe_client = CappedFetcher(UpstreamClient(probe_limits))
        prober = Prober(self.pool, probe_client, probe_settings(h), on_down=self._backend_down)
        await prober.initial_round()
        scraper = Scraper(self.pool, probe_client, scrape_settings(h))
        async with asyncio.TaskGroup() as tg:  # first metrics before the first request
            for backend in scraper.polled():
                tg.create_task(scraper.scrape_once(backend))
        return HealthRuntime(probe_client, prober, scraper)

    async def stop_tracing(self) -> None:
        """Export the spans still queued, then stop the exporter (after the loops)."""
        if self.tracing is not None:
            await self.tracing.close()

    def background_loops(self, health: HealthRuntime) -> Supervisor:
        """Probes, scrapes, the recorder and the InferencePool watch (those configured),
        supervised; the caller runs it (after `start_health`)."""
        loops = self.loops = Supervisor()
        loops.add(PROBE_LOOP, health.prober.run)
        loops.add("metrics-scrapes", health.scraper.run)
        if self.recorder is not None:
            loops.add("trace-recorder", self.recorder.run)
        loops.add("admission", self.admission.run)  # wakes queued requests, expires deadlines
        loops.add("backend-changes", self.backends.run)  # drained backends leave when idle
        if self.tracing is not None:
            loops.add("trace-export", self.tracing.run)
        self.live.watch_health(health.prober, health.scraper)
        if self.reloader is not None:
            loops.add("config-reload", self.reloader.run)
        if (kube := self._kube) is not None:
            loops.add("pod-discovery", lambda: self.pod_backends.run(kube, self.config.discovery))
        self.kv_loops.attach(loops)  # configured publishers now, discovered ones as they come
        self.shared.attach(loops)
        if self.peers is not None:
            loops.add(SIBLINGS_LOOP, self.peers.siblings.serve)
        return loops

    def loops_ok(self) -> bool:
        """Whether the loops the gateway's readiness depends on (the probes) are running,
        and the shared state's mirror has caught up (`state:`; memory: at once)."""
        return self.loops is not None and self.loops.running(PROBE_LOOP) and self.shared.settled

    def metrics_page(self) -> bytes:
        """The Prometheus exposition, with the per-backend gauges brought up to date."""
        now = self.clock()
        for b in self.pool:
            self.metrics.backend_up.labels(b.id).set(1 if b.snapshot(now).healthy else 0)
            self.metrics.in_flight.labels(b.id).set(b.in_flight)
        return self.metrics.render()

    def reconfigure(self, new: GatewayConfig) -> dict[str, Any]:
        """Apply a reloaded config's live fields (`gateway.config_reload`)."""
        report = self.live.apply(new)
        self.config, self.scheduler = self.live.config, self.router.scheduler
        return report

    def _backend_down(self, backend_id: str) -> None:
        """Probes found a backend down: its cache may be gone, and requests still waiting
        for its response head fail over now instead of waiting out `read_timeout_s`."""
        self.prefix.forget(backend_id)
        backend = self.pool.find(backend_id)
        if self._runtime is not None and backend is not None:
            n = self._runtime.client.abandon_heads(backend.spec.url, "backend declared down")
            if n:
                log.warning("backend %s down: %d request(s) waiting on it fail over", backend_id, n)

    def _apply_kv_batch(self, backend_id: str, batch: KvEventBatch) -> None:
        self.precise_index.apply(backend_id, batch.events)

    def _backend_removed(self, backend_id: str) -> None:
        """A discovered backend left: what was learnt about it goes (a pod that comes back
        at the same address is a new engine, with an empty cache)."""
        self.prefix.forget(backend_id)
        self.ttft_model.forget(backend_id)
        self.metrics.forget_backend(backend_id)

    # -- dispatch -------------------------------------------------------------------------
    async def _http(self, scope: Scope, receive: Receive, send: TrackedSend) -> None:
        path, method = scope["path"], scope["method"]
        handler = self._routes.get((method, path))
        if handler is None and path.startswith(admin_ops.BACKENDS + "/"):
            handler = self._admin_write  # /admin/backends/{id}[/drain|/resume]
        try:
            check_host(scope)
            scope["kvgate.principal"] = self.front_door.admit(scope)  # 401/404 before routing
            if handler is None:
                if path in self._allow:
                    allow = self._allow[path]
                    raise MethodNotAllowedError(
                        f"method {method} not allowed on {path}", allow=allow
                    )
                raise NotFoundError(f"no route for {method} {path}")
            await handler(scope, receive, send)
        except GatewayError as exc:
            await _send_error(send, exc)
        except BrokenBodyError:
            pass  # returning with the response unfinished makes the server drop the connection
        except Exception:
            log.exception("unhandled error on %s %s", method, clip(path))
            await _send_error(send, GatewayError("internal gateway error"))

    async def _inference(self, scope: Scope, receive: Receive, send: TrackedSend) -> None:
        headers = header_map(scope)
        rec = RequestRecord(
            request_id=request_id_from(headers.get("x-request-id")),
            method=scope["method"],
            path=scope["path"],
            started=self.clock(),
            client=client_address(scope),
            scheme=scope.get("scheme", "http"),
        )
        if (tracer := self.tracer) is not None:
            rec.trace = tracer.start(
                rec.method, rec.path, headers.get("traceparent"), headers.get("tracestate")
            )
        token = request_id_var.set(rec.request_id)
        try:
            await self._proxy_request(scope, receive, send, headers, rec)
        except GatewayError as exc:
            rec.status, rec.error = exc.status, exc.message
            rec.client_gone = isinstance(exc, ClientDisconnectedError)
            await _send_error(send, exc, [(b"x-request-id", rec.request_id.encode())])
        finally:
            self.admission.release(scope, rec)
            self._finish(rec, send)
            request_id_var.reset(token)

    async def _proxy_request(
        self,
        scope: Scope,
        receive: Receive,
        send: TrackedSend,
        headers: dict[str, str],
        rec: RequestRecord,
    ) -> None:
        check_json_content_type(headers.get("content-type"))
        limit = self.config.server.max_body_bytes
        declared = headers.get("content-length", "")
        if declared.isdigit() and int(declared) > limit:
            raise PayloadTooLargeError(f"request body exceeds the limit of {limit} bytes")
        body = await read_body(receive, limit)
        req = parse_inference_body(API_BY_PATH[scope["path"]], body)
        rec.model, rec.stream = req.model, req.stream
        if not await self.admission.acquire(scope, receive, headers, len(body), rec):
            return  # the client left while queued
        ids = await self.token_ids(req) if self.config.tokenizers else None
        if (trace := rec.trace) is not None:
            trace.route_started()
        route = self.router.route(req, headers, rec.request_id, token_ids=ids)
        if trace is not None:
            trace.routed(route.decision, len(route.request.prefix_hashes))
        rec.policy = route.decision.profile
        self.metrics.count_decision(route.decision, route.reason, route.seconds)
        proxy = self._require_runtime().proxy
        work = proxy.forward(
            route,
            path=scope["path"],
            query=scope["query_string"],
            raw_headers=scope["headers"],
            body=body,
            send=send,
            rec=rec,
        )
        watched = run_until_disconnect(
            work, receive, lambda: send.finished, disconnect_signal(scope)
        )
        left = await self.drain.run(watched, send)
        rec.client_gone = left is True
        if left is None:
            rec.error = rec.error or "ended by the shutdown grace"
        completed = send.status < 400 and not (rec.client_gone or rec.error)
        if self.recorder is not None and completed:
            session = route.request.session_key
            self.recorder.record(
                req, arrival=rec.started, session=session, output_tokens=rec.output_tokens
            )

    def _finish(self, rec: RequestRecord, send: TrackedSend) -> None:
        now = self.clock()
        if rec.client_gone:
            rec.status = 499  # client closed request (nginx's convention)
        elif send.status:
            rec.status = send.status
        backend = rec.backend or "none"
        self.metrics.requests_by(rec.model or "", backend, str(rec.status)).inc()
        if rec.backend:
            self.metrics.duration_by(rec.model or "", backend).observe(now - rec.started)
        if self.config.server.access_log:
            log_request(rec, now)
        if (trace := rec.trace) is not None and self.tracer is not None:
            trace.backend = rec.backend
            outcome = Outcome(
                rec.status, rec.model, rec.stream, rec.ttft_s, rec.usage, rec.error,
                rec.client, rec.request_id,
            )  # fmt: skip
            self.tracer.finish(trace, outcome)

    def _require_runtime(self) -> _Runtime:
        if self._runtime is None:
            raise NoHealthyBackendError("gateway is starting or stopping")
        return self._runtime

    # -- small endpoints ------------------------------------------------------------------
    async def _health(self, scope: Scope, receive: Receive, send: TrackedSend) -> None:
        await send_json(send, 200, {"status": "ok"})

    async def _ready(self, scope: Scope, receive: Receive, send: TrackedSend) -> None:
        healthy = len(self.pool.healthy())
        draining = self.drain.draining
        ok = healthy and self._runtime is not None and self.loops_ok() and not draining
        status = 200 if ok else 503
        loops = self.loops.states() if self.loops else {}
        body: dict[str, Any] = {
            "ready": ok,
            "healthy_backends": healthy,
            "backends": len(self.pool),
        }
        state = self.shared.state()  # shared routing state: degraded while Redis fails
        body |= {"loops": loops, "draining": draining, "state": state}
        if self.peers is not None:
            body["worker"] = self.peers.state()
        await send_json(send, status, body)

    async def _metrics(self, scope: Scope, receive: Receive, send: TrackedSend) -> None:
        page = await self.metrics_exposition()
        await send_bytes(send, 200, page, CONTENT_TYPE_LATEST.encode())

    async def metrics_exposition(self) -> bytes:
        """`/metrics`: this process's page, or with workers the whole gateway's."""
        return self.metrics_page() if self.peers is None else await self.peers.metrics_page()

    async def _models(self, scope: Scope, receive: Receive, send: TrackedSend) -> None:
        cards = self.pool.served_models()
        await send_json(send, 200, {"object": "list", "data": list(cards.values())})

    def backends_state(self) -> dict[str, Any]:
        """`/admin/backends` (both listeners), each backend with its `x-kvgate-backend` tag."""
        return backends_state(self)

    async def dry_run(
        self, body: bytes, headers: Mapping[str, str], query: bytes
    ) -> dict[str, Any]:
        """`/admin/route` (both listeners); `?api=` names the API, `?policy=` a profile."""
        check_json_content_type(headers.get("content-type"))
        params = parse_qs(query.decode("latin-1"))
        api, policy = params.get("api", [None])[0], params.get("policy", [None])[0]
        req = admin.parse_dry_run(body, api)
        ids = await self.token_ids(req)
        return admin.dry_run(
            self.router, req, headers, policy=policy, token_ids=ids, now=self.clock()
        )

    @property
    def tokenizing(self) -> bool:
        """Whether prompts are tokenized: a tokenizer is configured and the precise index
        follows some backend (its events have arrived)."""
        return bool(self.config.tokenizers) and bool(self.precise_index.block_sizes())

    async def token_ids(self, req: InferenceRequest) -> list[int] | None:
        """The prompt's token ids as the engine will see them, when `tokenizing` and a
        tokenizer is configured for the model; else None, and routing keeps the byte
        approximation."""
        if not self.tokenizing:
            return None
        tokenizer = self.tokenizers.for_model(req.model)
        return await tokenizer.token_ids(req) if tokenizer is not None else None

    async def _admin_backends(self, scope: Scope, receive: Receive, send: TrackedSend) -> None:
        await send_json(send, 200, self.backends_state())

    async def _admin_write(self, scope: Scope, receive: Receive, send: TrackedSend) -> None:
        await admin_ops.handle(
            self.operations, scope, receive, send, self.config.server.max_body_bytes
        )

    async def _admin_route(self, scope: Scope, receive: Receive, send: TrackedSend) -> None:
        body = await read_body(receive, self.config.server.max_body_bytes)
        answer = await self.dry_run(body, header_map(scope), scope["query_string"])
        await send_json(send, 200, answer)


async def _send_error(
    send: TrackedSend, exc: GatewayError, extra: list[tuple[bytes, bytes]] | None = None
) -> None:
    if isinstance(exc, ClientDisconnectedError):
        return  # nobody to answer
    if send.started:
        log.warning("error after the response started, dropping: %s", clip(exc.message))
        return
    await send_bytes(send, exc.status, exc.body(), headers=exc.headers() + (extra or []))


def build_app(config: GatewayConfig, workers: WorkerContext | None = None) -> GatewayApp:
    """Build the app from a validated config (`workers`: as worker of `kvgate serve
    --workers N`); plugin errors become `ConfigError`s."""
    if not config.backends and not config.discovery.pool:
        raise ConfigError(
            "no backends configured: give --backend URL, --pool NAME or a config file"
        )
    try:
        return GatewayApp(config, workers=workers)
    except ConfigError:
        raise
    except (PluginError, ValueError) as exc:
        raise ConfigError(f"routing: {exc}") from exc
