"""The kvgate ASGI application: composition root, request dispatch and lifespan.

`build_app(config)` wires pool, scheduler, proxy and metrics from a validated config. The app
is plain ASGI: a dict of routes, one error renderer, and a lifespan that owns the upstream
clients and the background health probes (cancelled on shutdown).
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs

from prometheus_client import CONTENT_TYPE_LATEST

from gateway import admin
from gateway.access_log import log_request, request_id_from, request_id_var
from gateway.admission import build_admission
from gateway.asgi import (
    Receive,
    Scope,
    Send,
    TrackedSend,
    disconnect_signal,
    header_map,
    read_body,
    run_until_disconnect,
    send_bytes,
    send_json,
)
from gateway.config import ConfigError, GatewayConfig
from gateway.errors import (
    GatewayError,
    MethodNotAllowedError,
    NoHealthyBackendError,
    NotFoundError,
    PayloadTooLargeError,
    UnsupportedMediaTypeError,
)
from gateway.http.client import ClientLimits, UpstreamClient
from gateway.http.fetcher import UpstreamFetcher
from gateway.inference_request import API_BY_PATH, parse_inference_body
from gateway.metrics import GatewayMetrics
from gateway.pod_backends import PodBackends
from gateway.prefix import PrefixTracker
from gateway.proxy import BrokenBodyError, Proxy, RequestRecord
from gateway.recorder import TraceRecorder
from gateway.router import RequestRouter
from gateway.upstream import make_client
from health.discovery.kube_api import KubeConnection, resolve_connection
from health.pool import BackendPool, BackendSpec
from health.prober import Prober, ProbeSettings
from health.scraper import Scraper, ScrapeSettings
from health.state import HealthPolicy
from routing.registry import PluginError
from scoring.prefix_feed import DEFAULT_BLOCK_TOKENS
from scoring.stack import build_routing_stack

log = logging.getLogger(__name__)
Handler = Callable[[Scope, Receive, TrackedSend], Awaitable[None]]


@dataclass(slots=True)
class HealthRuntime:
    """The background health work: active probes and metric scrapes, run by their owner."""

    probe_client: UpstreamFetcher
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
    ):
        self.config = config
        self.clock = clock
        self.metrics = GatewayMetrics()
        stack = build_routing_stack(config.routing, clock, rng or random.Random())
        self.prefix_index, self.ttft_model = stack.index, stack.ttft_model
        self.scheduler = stack.scheduler
        h = config.health
        self.pool = BackendPool(
            (
                BackendSpec(url=b.url, id=b.id or "", engine=b.engine, models=tuple(b.models))
                for b in config.backends
            ),
            HealthPolicy(
                fail_threshold=h.fail_threshold,
                success_threshold=h.success_threshold,
                passive_fail_threshold=h.passive_fail_threshold,
                ejection_base_s=h.ejection_base_s,
                ejection_max_s=h.ejection_max_s,
            ),
            clock,
            stale_after_s=h.metrics_stale_after_s,
        )
        self.prefix = PrefixTracker(stack.feed)
        self.router = RequestRouter(self.pool, self.scheduler, config.routing, self.prefix)
        self.recorder = _recorder(config, clock)
        self.pod_backends = PodBackends(self.pool, self._backend_removed)
        self.admission = build_admission(
            config, self.pool, self.scheduler, clock, self.metrics.registry
        )
        self._kube: KubeConnection | None = None
        self._runtime: _Runtime | None = None
        self._routes: dict[tuple[str, str], Handler] = {
            ("GET", "/health"): self._health,
            ("GET", "/ready"): self._ready,
            ("GET", "/metrics"): self._metrics,
            ("GET", "/v1/models"): self._models,
            ("GET", "/admin/backends"): self._admin_backends,
            ("POST", "/admin/route"): self._admin_route,
        }
        for path in API_BY_PATH:
            self._routes[("POST", path)] = self._inference
        self._paths = {path for _, path in self._routes}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            await self._http(scope, receive, TrackedSend(send))
        elif scope["type"] == "lifespan":
            await self._lifespan(receive, send)

    # -- lifespan -------------------------------------------------------------------------
    async def _lifespan(self, receive: Receive, send: Send) -> None:
        await receive()  # lifespan.startup
        try:
            runtime = await self._start()
        except Exception as exc:  # report start-up failure to the server, which exits
            log.exception("start-up failed")
            await send({"type": "lifespan.startup.failed", "message": str(exc)})
            return
        async with asyncio.TaskGroup() as tg:
            probes = tg.create_task(runtime.health.prober.run(), name="health-probes")
            scrapes = tg.create_task(runtime.health.scraper.run(), name="metrics-scrapes")
            admission = tg.create_task(self.admission.run(), name="admission-pump")
            recording = (
                tg.create_task(self.recorder.run(), name="trace-recorder")
                if self.recorder
                else None
            )
            watch = self.discovery()
            discovery = tg.create_task(watch, name="pod-discovery") if watch else None
            await send({"type": "lifespan.startup.complete"})
            await receive()  # lifespan.shutdown
            probes.cancel()
            scrapes.cancel()
            for task in (recording, discovery, admission):
                if task is not None:
                    task.cancel()
        if self.recorder is not None:
            self.recorder.close()  # the lines of the last second
        await runtime.client.aclose()
        await runtime.health.probe_client.aclose()
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
        """A first probe round and metric scrape; the caller runs `prober.run()` and
        `scraper.run()` and closes `probe_client` (the front door here, `kvgate epp` too),
        and runs `discovery()` if there is one."""
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
        probe_client = UpstreamFetcher(UpstreamClient(probe_limits))
        prober = Prober(
            self.pool,
            probe_client,
            ProbeSettings(h.probe_interval_s, h.probe_timeout_s, h.model_refresh_s),
            on_down=self.prefix.forget,
        )
        await prober.initial_round()
        scraper = Scraper(
            self.pool,
            probe_client,
            ScrapeSettings(h.scrape_interval_s, h.scrape_timeout_s, h.metrics_stale_after_s),
        )
        async with asyncio.TaskGroup() as tg:  # first metrics before the first request
            for backend in scraper.polled():
                tg.create_task(scraper.scrape_once(backend))
        return HealthRuntime(probe_client, prober, scraper)

    def discovery(self) -> Coroutine[Any, Any, None] | None:
        """The InferencePool watch that adds and removes backends (after `start_health`);
        None without `discovery.pool`."""
        if self._kube is None:
            return None
        return self.pod_backends.run(self._kube, self.config.discovery)

    def metrics_page(self) -> bytes:
        """The Prometheus exposition, with the per-backend gauges brought up to date."""
        now = self.clock()
        for b in self.pool:
            self.metrics.backend_up.labels(b.id).set(1 if b.snapshot(now).healthy else 0)
            self.metrics.in_flight.labels(b.id).set(b.in_flight)
        return self.metrics.render()

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
        try:
            if handler is None:
                if path in self._paths:
                    raise MethodNotAllowedError(f"method {method} not allowed on {path}")
                raise NotFoundError(f"no route for {method} {path}")
            await handler(scope, receive, send)
        except GatewayError as exc:
            await _send_error(send, exc)
        except BrokenBodyError:
            pass  # returning with the response unfinished makes the server drop the connection
        except Exception:
            log.exception("unhandled error on %s %s", method, path)
            await _send_error(send, GatewayError("internal gateway error"))

    async def _inference(self, scope: Scope, receive: Receive, send: TrackedSend) -> None:
        headers = header_map(scope)
        rec = RequestRecord(
            request_id=request_id_from(headers.get("x-request-id")),
            method=scope["method"],
            path=scope["path"],
            started=self.clock(),
        )
        token = request_id_var.set(rec.request_id)
        try:
            await self._proxy_request(scope, receive, send, headers, rec)
        except GatewayError as exc:
            rec.status, rec.error = exc.status, exc.message
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
        _check_content_type(headers.get("content-type"))
        limit = self.config.server.max_body_bytes
        declared = headers.get("content-length", "")
        if declared.isdigit() and int(declared) > limit:
            raise PayloadTooLargeError(f"request body exceeds the limit of {limit} bytes")
        body = await read_body(receive, limit)
        req = parse_inference_body(API_BY_PATH[scope["path"]], body)
        rec.model, rec.stream = req.model, req.stream
        if not await self.admission.acquire(scope, receive, headers, len(body), rec):
            return  # the client left while queued
        route = self.router.route(req, headers, rec.request_id)
        rec.policy = route.decision.profile
        self.metrics.decisions_by(route.decision.profile, route.decision.target).inc()
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
        rec.client_gone = await run_until_disconnect(
            work, receive, lambda: send.finished, disconnect_signal(scope)
        )
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

    def _require_runtime(self) -> _Runtime:
        if self._runtime is None:
            raise NoHealthyBackendError("gateway is starting or stopping")
        return self._runtime

    # -- small endpoints ------------------------------------------------------------------
    async def _health(self, scope: Scope, receive: Receive, send: TrackedSend) -> None:
        await send_json(send, 200, {"status": "ok"})

    async def _ready(self, scope: Scope, receive: Receive, send: TrackedSend) -> None:
        healthy = len(self.pool.healthy())
        status = 200 if healthy and self._runtime is not None else 503
        await send_json(
            send,
            status,
            {"ready": status == 200, "healthy_backends": healthy, "backends": len(self.pool)},
        )

    async def _metrics(self, scope: Scope, receive: Receive, send: TrackedSend) -> None:
        await send_bytes(send, 200, self.metrics_page(), CONTENT_TYPE_LATEST.encode())

    async def _models(self, scope: Scope, receive: Receive, send: TrackedSend) -> None:
        cards = self.pool.served_models()
        await send_json(send, 200, {"object": "list", "data": list(cards.values())})

    async def _admin_backends(self, scope: Scope, receive: Receive, send: TrackedSend) -> None:
        state = admin.backends_state(
            self.pool, self.prefix_index, self.ttft_model, self.prefix.cache_hits
        )
        await send_json(send, 200, {**state, "admission": self.admission.state()})

    async def _admin_route(self, scope: Scope, receive: Receive, send: TrackedSend) -> None:
        headers = header_map(scope)
        _check_content_type(headers.get("content-type"))
        body = await read_body(receive, self.config.server.max_body_bytes)
        query = parse_qs(scope["query_string"].decode("latin-1"))
        api = query.get("api", [None])[0]
        await send_json(send, 200, admin.dry_run(self.router, body, headers, api))


def _check_content_type(value: str | None) -> None:
    if value is None or value == "application/json":
        return  # lenient like most OpenAI servers: a missing type is read as JSON
    mime = value.split(";", 1)[0].strip().lower()
    if mime != "application/json" and not mime.endswith("+json"):
        raise UnsupportedMediaTypeError(
            f"content type {mime or '(empty)'!r} is not supported; send application/json"
        )


async def _send_error(
    send: TrackedSend, exc: GatewayError, extra: list[tuple[bytes, bytes]] | None = None
) -> None:
    if send.started:
        log.warning("error after the response started, dropping: %s", exc.message)
        return
    await send_bytes(send, exc.status, exc.body(), headers=exc.headers() + (extra or []))


def _recorder(config: GatewayConfig, clock: Callable[[], float]) -> TraceRecorder | None:
    if config.server.record_path is None:
        return None
    prefix = config.routing.prefix
    return TraceRecorder(
        config.server.record_path,
        block_tokens=prefix.block_tokens or DEFAULT_BLOCK_TOKENS,
        chars_per_token=prefix.chars_per_token,
        clock=clock,
    )


def build_app(config: GatewayConfig) -> GatewayApp:
    """Build the app from a validated config; plugin errors become `ConfigError`s."""
    if not config.backends and not config.discovery.pool:
        raise ConfigError(
            "no backends configured: give --backend URL, --pool NAME or a config file"
        )
    try:
        return GatewayApp(config)
    except (PluginError, ValueError) as exc:
        raise ConfigError(f"routing: {exc}") from exc
