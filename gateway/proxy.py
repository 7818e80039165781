"""Forward one inference request upstream, with failover, and relay the answer unbuffered.

Failover: a connect error, no response head within the first-byte timeout (a hung backend),
or a 502/503 answer, before any byte reached the client moves on to the next-ranked backend,
up to `max_attempts` tries, while the retry budget (`gateway.retry_budget`) allows; a retry
it denies returns the attempt's own error. Once the response has started nothing is
retried; a stream that breaks midway ends, on an event boundary, with an SSE error event
(`gateway.sse_events`). An attempt that fails, or is answered with an error status, is
withdrawn from the prefix index: only the backend that served the prompt keeps its blocks.
No free upstream connection slot is the gateway's own overload (503 `gateway_overloaded`):
not a failover, and never counted against a backend.

Every answer's usage is read on the way through (`gateway.usage`) and its cached prompt
tokens checked against the index's prediction. A streaming chat or completions request whose
client did not ask for usage is forwarded with `stream_options.include_usage`, and the usage
event that this adds is left out of what the client receives.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from gateway.asgi import Send
from gateway.errors import GatewayError, NoHealthyBackendError, UpstreamError
from gateway.header_policy import HeaderPolicy
from gateway.http.client import UpstreamClient, UpstreamResponse
from gateway.http.http1 import HttpClientError, PoolTimeout
from gateway.metrics import GatewayMetrics
from gateway.output_tokens import OutputTokenCounter
from gateway.prefix import PrefixTracker
from gateway.retry_budget import RetryBudget
from gateway.router import Route
from gateway.sse_events import EventAligner
from gateway.tracing.spans import RequestTrace, UpstreamSpan
from gateway.upstream import (
    FirstByteTimeouts,
    error_kind,
    failure_detail,
    map_client_error,
    overloaded_error,
    request_headers,
    response_headers,
)
from gateway.usage import (
    STREAM_USAGE_APIS,
    Usage,
    UsageEventFilter,
    UsageReader,
    UsageTap,
    ask_for_usage,
)
from health.pool import Backend, BackendPool
from scoring.state.prefix_feed import Dispatch

log = logging.getLogger(__name__)

_RETRY_STATUSES = frozenset({502, 503})
_FAILURE_STATUSES = frozenset({502, 503, 504})


@dataclass(slots=True)
class RequestRecord:
    """What one request did, filled in as it goes; becomes the access-log line."""

    request_id: str
    method: str
    path: str
    started: float
    model: str | None = None
    policy: str | None = None
    backend: str | None = None
    status: int = 0
    attempts: int = 0
    ttft_s: float | None = None
    stream: bool = False
    client_gone: bool = False
    error: str | None = None
    output_tokens: int | None = None  # counted only when recording a trace
    client: str | None = None  # the peer's host, for X-Forwarded-For
    scheme: str = "http"
    usage: Usage | None = None  # what the answer reported (admission corrects rate limits)
    trace: RequestTrace | None = None  # its spans, while tracing is on


@dataclass(frozen=True, slots=True)
class _Outgoing:
    """The request as every attempt sends it."""

    target: str
    headers: list[tuple[bytes, bytes]]
    body: bytes
    first_byte_timeout: float | None


class BrokenBodyError(Exception):
    """A non-streaming upstream body broke after the response started; the connection must be
    dropped so the client sees the truncation."""


class Proxy:
    """Sends a routed request to its ranked backends in turn and relays the first answer."""

    def __init__(
        self,
        pool: BackendPool,
        client: UpstreamClient,
        metrics: GatewayMetrics,
        clock: Callable[[], float],
        *,
        max_attempts: int,
        prefix: PrefixTracker,
        count_output: bool = False,
        first_byte: FirstByteTimeouts | None = None,
        budget: RetryBudget | None = None,
        headers: HeaderPolicy | None = None,
    ) -> None:
        self._headers = headers or HeaderPolicy()
        self._prefix = prefix
        self._count_output = count_output
        self._pool = pool
        self._client = client
        self._metrics = metrics
        self._clock = clock
        self._max_attempts = max_attempts
        self._first_byte = first_byte or FirstByteTimeouts()
        self._budget = budget

    async def forward(
        self,
        route: Route,
        *,
        path: str,
        query: bytes,
        raw_headers: list[tuple[bytes, bytes]],
        body: bytes,
        send: Send,
        rec: RequestRecord,
    ) -> None:
        attempts = route.decision.ranked[: self._max_attempts]
        trace = rec.trace
        headers = request_headers(
            raw_headers, rec.request_id, self._headers, rec.client, rec.scheme,
            traced=trace is not None,
        )  # fmt: skip
        target = path + ("?" + query.decode("latin-1") if query else "")
        strip_usage = False
        if route.request.stream and route.request.api in STREAM_USAGE_APIS:
            asked = ask_for_usage(body)
            if asked is not None:
                body, strip_usage = asked, True
        fb = self._first_byte
        out = _Outgoing(target, headers, body, fb.stream if route.request.stream else fb.non_stream)
        if self._budget is not None:
            self._budget.record_request()
        last_error: GatewayError | None = None
        for i, backend_id in enumerate(attempts):
            backend = self._pool.find(backend_id)
            if backend is None or (i and backend.draining):  # left or drained since then
                continue
            rec.backend, rec.attempts = backend_id, i + 1
            more = i + 1 < len(attempts)
            dispatch = self._begin(backend, route)
            span = None
            if trace is not None:
                span = trace.upstream(backend_id, backend.spec.url, i + 1)
                if backend_id == route.decision.target:
                    trace.matched_blocks = dispatch.matched
            try:
                opened = await self._open(dispatch, out, rec, more=more, span=span)
                if isinstance(opened, UpstreamError):
                    last_error = opened
                    continue
                try:
                    if opened.status_code >= 400:  # the engine did not take the prompt
                        self._prefix.withdraw(dispatch)
                    if opened.status_code in _RETRY_STATUSES and more and self._may_retry(rec):
                        self._failed_status(backend, opened.status_code)
                        continue
                    await self._relay(dispatch, opened, send, rec, strip_usage)
                    return
                finally:
                    await opened.aclose()
            finally:
                self._end(dispatch)
                if span is not None:
                    _end_span(span, rec)
        if last_error is None:  # every ranked backend left the pool before it was tried
            raise NoHealthyBackendError("the chosen backends left the pool")
        raise last_error

    async def _open(
        self,
        dispatch: Dispatch[Backend],
        out: _Outgoing,
        rec: RequestRecord,
        *,
        more: bool,
        span: UpstreamSpan | None = None,
    ) -> UpstreamResponse | UpstreamError:
        """Send the request to the dispatch's backend: its response head, or the error to
        fail over from (raised instead when there is no failover). With `span`, the engine
        gets a `traceparent` naming it as the parent."""
        backend = dispatch.endpoint
        headers = out.headers
        if span is not None and rec.trace is not None:
            headers = headers + rec.trace.propagation(span.span_id)
        try:
            resp = await self._client.send(
                backend.spec.url,
                out.target,
                "POST",
                headers,
                out.body,
                first_byte_timeout=out.first_byte_timeout,
            )
        except PoolTimeout as exc:
            self._prefix.withdraw(dispatch)
            if rec.attempts == 1:
                rec.backend = None  # no backend saw it: keep the 503 off their metrics
            overloaded = overloaded_error(exc)
            if span is not None:
                span.error = overloaded.message
            raise overloaded from None
        except HttpClientError as exc:
            self._prefix.withdraw(dispatch)
            err = map_client_error(exc)
            if span is not None:
                span.error = err.message
            self._failed(backend, err, failure_detail(exc, backend.id))
            if err.retryable and more and self._may_retry(rec):
                return err
            raise err from None
        if span is not None:
            span.status = resp.status_code
        return resp

    def _may_retry(self, rec: RequestRecord) -> bool:
        """Take a retry from the budget (counted either way)."""
        if self._budget is not None and not self._budget.try_retry():
            self._metrics.retries_denied.inc()
            return False
        self._metrics.retries.labels(rec.model).inc()
        return True

    async def _relay(
        self,
        dispatch: Dispatch[Backend],
        resp: UpstreamResponse,
        send: Send,
        rec: RequestRecord,
        strip_usage: bool,
    ) -> None:
        backend = dispatch.endpoint
        is_sse = (resp.header(b"content-type") or b"").startswith(b"text/event-stream")
        ok = resp.status_code < 400
        extra = [(b"x-request-id", rec.request_id.encode())]
        if (tag := self._headers.backend_tag(backend.id)) is not None:
            extra.append((b"x-kvgate-backend", tag))
        rec.status = resp.status_code
        await send(
            {
                "type": "http.response.start",
                "status": resp.status_code,
                "headers": response_headers(resp.headers, extra),
            }
        )
        if not is_sse:
            self._prefix.first_token(dispatch, None)  # the answer is complete: prefill is done
        counter = OutputTokenCounter(is_sse) if self._count_output else None
        reader: UsageReader = UsageEventFilter() if strip_usage and is_sse and ok else UsageTap()
        aligner = EventAligner() if is_sse else None
        try:
            await self._relay_body(
                dispatch, resp, send, rec, aligner=aligner, reader=reader, counter=counter
            )
        except HttpClientError as exc:
            err = map_client_error(exc)
            self._failed(backend, err, failure_detail(exc, backend.id))
            rec.error = err.message
            if aligner is None:
                raise BrokenBodyError(err.message) from None
            event = aligner.error_event(_error_obj(err))
            await send({"type": "http.response.body", "body": event, "more_body": False})
            return
        usage = rec.usage = reader.usage()
        if counter is not None:
            rec.output_tokens = counter.output_tokens(usage)
        if ok and usage is not None and usage.prompt_tokens is not None:
            check = self._prefix.observe(dispatch, usage)
            if check is not None:
                self._metrics.count_cache_check(backend.id, usage.prompt_tokens, check)
        if resp.status_code in _FAILURE_STATUSES:
            self._failed_status(backend, resp.status_code)
        else:
            backend.state.record_upstream_success()

    async def _relay_body(
        self,
        dispatch: Dispatch[Backend],
        resp: UpstreamResponse,
        send: Send,
        rec: RequestRecord,
        *,
        aligner: EventAligner | None,
        reader: UsageReader,
        counter: OutputTokenCounter | None,
    ) -> None:
        """Relay the body as it arrives (what `reader` lets through; an event stream in whole
        events), timing SSE data events for TTFT and inter-token latency."""
        labels = (rec.model or "", dispatch.endpoint.id)
        last_event: float | None = None
        ended = False
        async for data in resp.aiter_raw():
            if counter is not None:
                counter.feed(data)
            chunk = reader.feed(data)
            ended = resp.at_end
            if ended:
                chunk += reader.finish()
            if aligner is not None:
                chunk = aligner.feed(chunk)
                if ended:
                    chunk += aligner.finish()
            if not ended and not chunk:
                continue  # held back, or the usage event taken out
            if aligner is not None and b"data:" in chunk and not chunk.startswith(b"data: [DONE]"):
                now = self._clock()
                if last_event is None:
                    rec.ttft_s = now - rec.started
                    self._metrics.ttft_by(*labels).observe(rec.ttft_s)
                    self._prefix.first_token(dispatch, now - dispatch.at)
                else:
                    self._metrics.itl_by(*labels).observe(now - last_event)
                last_event = now
            # The last chunk carries the end of the response: one write fewer.
            await send({"type": "http.response.body", "body": chunk, "more_body": not ended})
        if not ended:
            rest = reader.finish()
            if aligner is not None:
                rest = aligner.feed(rest) + aligner.finish()
            await send({"type": "http.response.body", "body": rest, "more_body": False})

    def _begin(self, backend: Backend, route: Route) -> Dispatch[Backend]:
        dispatch = self._prefix.dispatch(backend, route.request, self._clock())
        backend.in_flight += 1
        backend.dispatched += 1
        return dispatch

    def _end(self, dispatch: Dispatch[Backend]) -> None:
        dispatch.endpoint.in_flight -= 1
        self._prefix.ended(dispatch)  # settles the prefill count if not yet done

    def _failed(self, backend: Backend, err: UpstreamError, detail: str) -> None:
        self._metrics.upstream_errors.labels(backend.id, error_kind(err)).inc()
        log.warning("upstream failure (%s): %s", err.code, detail)
        self._record_failure(backend, detail)

    def _failed_status(self, backend: Backend, status: int) -> None:
        self._metrics.upstream_errors.labels(backend.id, "status_5xx").inc()
        self._record_failure(backend, f"backend answered {status}")

    def _record_failure(self, backend: Backend, message: str) -> None:
        if backend.state.record_upstream_failure(self._pool.now(), message):
            log.warning("backend %s ejected after upstream failures: %s", backend.id, message)


def _end_span(span: UpstreamSpan, rec: RequestRecord) -> None:
    """The attempt is over; a relay that broke midway is its error."""
    span.end_ns = time.time_ns()
    if span.error is None and span.status and rec.error is not None and rec.backend == span.backend:
        span.error = rec.error


def _error_obj(err: GatewayError) -> dict[str, str]:
    return {"message": err.message, "type": err.type, "code": err.code}
