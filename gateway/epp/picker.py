"""The endpoint picker's routing and accounting: the front door's router, prefix tracker and
load counts, driven by ext_proc events instead of a relayed request.

Per request (`Exchange`): `pick` parses the body (`parse_inference_body`, as the front door),
routes it and counts a dispatch to the first-ranked backend; `served` moves that dispatch to
the endpoint the proxy reports it really used; `response_status`, `response_chunk` and
`finish` feed status, TTFT (the first response body chunk) and the answer's usage to the same
places the front door's proxy feeds them. `finish` runs once, whether the stream ended or was
cancelled, and releases the in-flight count.

Endpoints are `host:port` of each backend's URL, as the proxy connects to them (an
`ORIGINAL_DST` cluster needs IP addresses there).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from gateway.app import GatewayApp
from gateway.errors import GatewayError, NoHealthyBackendError
from gateway.inference_request import API_BY_PATH, parse_inference_body
from gateway.tracing.spans import Outcome, RequestTrace
from gateway.usage import (
    STREAM_USAGE_APIS,
    UsageEventFilter,
    UsageReader,
    UsageTap,
    ask_for_usage,
)
from health.pool import Backend
from routing.types import RoutingRequest
from scoring.state.prefix_feed import Dispatch

_FAILURE_STATUSES = frozenset({502, 503, 504})


@dataclass(slots=True)
class Exchange:
    """One request's state between its pick and the end of its response."""

    request_id: str
    started: float
    destination: str  # the header value: ip:port[,fallback...]
    model: str = ""
    policy: str = "none"
    request: RoutingRequest | None = None
    dispatch: Dispatch[Backend] | None = None
    status: int = 0
    first_chunk_seen: bool = False
    body: bytes | None = None  # the body to forward instead, when it was changed
    reader: UsageReader = field(default_factory=UsageTap)
    done: bool = False
    stream: bool = False
    ttft_s: float | None = None
    trace: RequestTrace | None = None  # its server and routing spans, while tracing is on

    def trace_headers(self) -> list[tuple[bytes, bytes]]:
        """`traceparent` (and `tracestate`) for the engine, naming the routing span as its
        parent; none while tracing is off."""
        t = self.trace
        return t.propagation(t.route_id) if t is not None and t.route_id else []


class EndpointPicker:
    """Routes ext_proc requests over a `GatewayApp`'s pool with its router and accounting."""

    def __init__(self, app: GatewayApp, max_fallbacks: int = 2) -> None:
        self._app = app
        self._max_endpoints = 1 + max_fallbacks
        backends: list[Backend] = list(app.pool)
        self._address: dict[str, str] = {b.id: urlsplit(b.spec.url).netloc for b in backends}
        self._by_address = {a: i for i, a in self._address.items()}

    def pick(
        self,
        path: str,
        headers: Mapping[str, str],
        body: bytes,
        request_id: str,
        subset: list[str] | None = None,
        *,
        token_ids: list[int] | None = None,
    ) -> Exchange:
        """Route one request; raises a `GatewayError` (400, 404, 503, ...) it cannot."""
        app = self._app
        allowed = None if subset is None else {self._by_address.get(a, a) for a in subset}
        api = API_BY_PATH.get(path.split("?", 1)[0])
        if api is None:  # not an inference call (e.g. GET /v1/models): any ready endpoint
            ranked = self._least_busy(allowed)
            return Exchange(request_id, app.clock(), self._destination(ranked))
        trace = None
        if (tracer := app.tracer) is not None:
            method = headers.get(":method", "POST")
            trace = tracer.start(
                method, path.split("?", 1)[0], headers.get("traceparent"), headers.get("tracestate")
            )
        try:
            req = parse_inference_body(api, body)
            if trace is not None:
                trace.route_started()
            route = app.router.route(req, headers, request_id, subset=allowed, token_ids=token_ids)
        except GatewayError as exc:
            if trace is not None and tracer is not None:
                tracer.finish(trace, Outcome(exc.status, None, False, None, None, exc.message))
            raise
        decision = route.decision
        if trace is not None:
            trace.routed(decision, len(route.request.prefix_hashes))
        app.metrics.count_decision(decision, route.reason, route.seconds)
        ex = Exchange(
            request_id,
            app.clock(),
            self._destination(decision.ranked),
            model=req.model,
            policy=decision.profile,
            request=route.request,
            stream=req.stream,
            trace=trace,
        )
        if req.stream and api in STREAM_USAGE_APIS:
            ex.body = ask_for_usage(body)  # None: the client asked for usage itself
        ex.dispatch = self._begin(app.pool.get(decision.ranked[0]), route.request)
        if trace is not None:
            trace.matched_blocks = ex.dispatch.matched
        return ex

    async def token_ids(self, path: str, body: bytes) -> list[int] | None:
        """The prompt's token ids for the precise index, when a tokenizer is configured and
        some backend's KV events have arrived; None otherwise, or for a body `pick` will
        refuse (it answers the error)."""
        app = self._app
        api = API_BY_PATH.get(path.split("?", 1)[0])
        if api is None or not app.tokenizing:
            return None
        try:
            req = parse_inference_body(api, body)
        except GatewayError:
            return None
        return await app.token_ids(req)

    def served(self, ex: Exchange, address: str) -> None:
        """The proxy says `address` served: credit it, withdraw from the one picked if other."""
        backend_id = self._by_address.get(address)
        d = ex.dispatch
        if d is None or ex.request is None or ex.done or backend_id in (None, d.endpoint.id):
            return
        self._app.prefix.withdraw(d)
        self._end(d)
        # The proxy moved on from the one picked (it refused or failed): a passive failure.
        skipped = d.endpoint
        skipped.state.record_upstream_failure(self._app.pool.now(), "skipped by the proxy")
        ex.dispatch = self._begin(self._app.pool.get(backend_id), ex.request)

    def response_status(self, ex: Exchange, status: int, content_type: str = "") -> None:
        ex.status = status
        if ex.body is not None and status < 400 and content_type.startswith("text/event-stream"):
            ex.reader = UsageEventFilter()  # the usage event we asked for is not relayed
        d = ex.dispatch
        if d is None or status < 400:
            return
        self._app.prefix.withdraw(d)  # the engine did not take the prompt
        if status in _FAILURE_STATUSES:
            backend = d.endpoint
            backend.state.record_upstream_failure(self._app.pool.now(), f"answered {status}")

    def response_chunk(self, ex: Exchange, data: bytes, end: bool) -> bytes:
        """What to relay of this response body chunk (the usage event we added is not)."""
        out = ex.reader.feed(data)
        if end:
            out += ex.reader.finish()
        d = ex.dispatch
        if not ex.first_chunk_seen and d is not None and data.strip():
            ex.first_chunk_seen = True
            self._first_chunk(ex, d)
        return out

    def _first_chunk(self, ex: Exchange, d: Dispatch[Backend]) -> None:
        now = self._app.clock()
        ex.ttft_s = now - ex.started
        self._app.metrics.ttft_by(ex.model, d.endpoint.id).observe(ex.ttft_s)
        self._app.prefix.first_token(d, now - d.at)

    def finish(self, ex: Exchange, completed: bool) -> None:
        """The response ended (`completed`) or the stream was cut: settle the accounting."""
        if ex.done:
            return
        ex.done = True
        app, d = self._app, ex.dispatch
        backend = d.endpoint.id if d is not None else "none"
        status = str(ex.status) if completed and ex.status else "499"
        app.metrics.requests_by(ex.model, backend, status).inc()
        usage = ex.reader.usage() if d is not None and completed and 0 < ex.status < 400 else None
        if ex.trace is not None and app.tracer is not None:
            ex.trace.backend = d.endpoint.id if d is not None else None
            outcome = Outcome(int(status), ex.model or None, ex.stream, ex.ttft_s, usage, None)
            outcome.request_id = ex.request_id
            app.tracer.finish(ex.trace, outcome)
        if d is None:
            return
        if usage is not None and usage.prompt_tokens is not None:
            check = app.prefix.observe(d, usage)
            if check is not None:
                app.metrics.count_cache_check(backend, usage.prompt_tokens, check)
        if completed and 0 < ex.status < 400:
            d.endpoint.state.record_upstream_success()
        app.metrics.duration_by(ex.model, backend).observe(app.clock() - ex.started)
        self._end(d)

    def _begin(self, backend: Backend, request: RoutingRequest) -> Dispatch[Backend]:
        d = self._app.prefix.dispatch(backend, request, self._app.clock())
        backend.in_flight += 1
        backend.dispatched += 1
        return d

    def _end(self, d: Dispatch[Backend]) -> None:
        self._app.prefix.first_token(d, None)  # settles the prefill count if not yet done
        d.endpoint.in_flight -= 1

    def _least_busy(self, allowed: set[str] | None) -> tuple[str, ...]:
        ready = [b for b in self._app.pool.healthy() if allowed is None or b.id in allowed]
        if not ready:
            raise NoHealthyBackendError("no healthy backend")
        return tuple(b.id for b in sorted(ready, key=lambda b: b.in_flight))

    def _destination(self, ranked: tuple[str, ...] | list[str]) -> str:
        return ",".join(self._address[i] for i in ranked[: self._max_endpoints])
