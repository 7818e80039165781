"""A request's lifecycle, written once; the front door's proxy and the endpoint picker drive it.

Per request: `start` → `parse` (the model the engine gets: `resolve`) → `pick` → per attempt
`dispatch` … `end` → `finish`; in it: `answered(status)` (an error status withdraws the prompt
from the index; 502/503/504 is a passive failure), then `settled` (a whole answer: prefill
done) or `event` per streamed event (the first teaches TTFT, the others inter-token latency),
then `completed(usage)` (the cached tokens graded, a passive success). Failures: `unanswered`
(no answer: withdrawn and a passive failure), `broke` (the answer broke midway), `overloaded`
(no upstream slot: withdrawn, nobody's fault), `skipped` (the proxy used another endpoint).
`end` takes the attempt's in-flight count back and tells the shared state. Transports never
touch the index, counts, passive health, metrics, trace, access log or recorder themselves.

P/D legs are attempts too (`dispatch(leg="prefill")`, `prefilled` or `prefill_failed`).
Stored responses: `pin` finds one's backend, `pick(pin=)`/`pick_stored` go there, `stored`
learns one; a `lookup` leg (on a stored response itself) teaches neither TTFT nor cache.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from gateway.access_log import log_request, request_id_from
from gateway.cache_ledger import CacheLedger
from gateway.control_headers import MODEL_REWRITE, control_header
from gateway.errors import GatewayError, ResponseNotFoundError, UpstreamError
from gateway.inference_request import InferenceRequest, prompt_token_ids
from gateway.large_body import BodyParser
from gateway.metrics import GatewayMetrics
from gateway.recorder import TraceRecorder
from gateway.request_record import RequestRecord
from gateway.responses.affinity import Pin, ResponseAffinity
from gateway.router import RequestRouter, Route
from gateway.tokens.build import TokenizerSet
from gateway.tracing.spans import Outcome, Tracer
from gateway.upstream import error_kind
from gateway.usage import Usage
from health.pool import Backend, BackendPool
from routing.model_rewrite import ModelRewrites
from scoring.state.prefix_feed import Dispatch

if TYPE_CHECKING:
    from gateway.tracing.otlp_native import NativeTracer

log = logging.getLogger(__name__)

FAILURE_STATUSES = frozenset({502, 503, 504})  # an answer that counts against the backend
Attempt = Dispatch[Backend]


class Director:
    """Owns every request's accounting (see the module docstring); no I/O but the logs."""

    def __init__(
        self,
        router: RequestRouter,
        pool: BackendPool,
        ledger: CacheLedger,
        metrics: GatewayMetrics,
        clock: Callable[[], float],
        *,
        tokenizers: TokenizerSet,
        tokenize: bool = False,
        tracer: Tracer | NativeTracer | None = None,
        recorder: TraceRecorder | None = None,
        access_log: bool = True,
        affinity: ResponseAffinity | None = None,
        rewrites: ModelRewrites | None = None,
    ) -> None:
        self.router = router
        self.pool = pool
        self.ledger = ledger
        self.metrics = metrics
        self.clock = clock
        self.tracer = tracer
        self.recorder = recorder
        self._tokenizers = tokenizers
        self._tokenize = tokenize  # a tokenizer is configured for some model
        self._access_log = access_log
        self.parser = BodyParser()  # a large body off the event loop, one at a time
        self.affinity = affinity  # stored responses' backends (None: not tracked)
        self.rewrites = rewrites  # InferenceModelRewrite rules (None: none)

    # -- the request -------------------------------------------------------------------
    def start(
        self,
        method: str,
        path: str,
        headers: Mapping[str, str],
        *,
        client: str | None = None,
        scheme: str = "http",
        request_id: str | None = None,
        traced: bool = True,
    ) -> RequestRecord:
        """A request arrived: its id (`request_id`, else the client's `x-request-id` if sane,
        else a new one) and its trace (unless not `traced`: a probe)."""
        rec_id = request_id or request_id_from(headers.get("x-request-id"))
        rec = RequestRecord(rec_id, method, path, self.clock())
        # Assigned, not passed as keywords: a class called with keywords builds a dict of
        # them on every call (per request, on the hot path).
        rec.client, rec.scheme = client, scheme
        if (tracer := self.tracer) is not None and traced:
            rec.trace = tracer.start(
                method, path, headers.get("traceparent"), headers.get("tracestate")
            )
        return rec

    async def parse(
        self, api: str, body: bytes, headers: Mapping[str, str] | None = None
    ) -> InferenceRequest:
        """The request body of `api` parsed (`gateway.large_body`) with its model resolved
        (`resolve`), or a `GatewayError` (400 for a bad body)."""
        return self.resolve(await self.parser.parse(api, body), headers)

    def resolve(
        self, req: InferenceRequest, headers: Mapping[str, str] | None = None
    ) -> InferenceRequest:
        """`req` for the model the engine gets: the pool's default when its body names none
        (SGLang's native API, vLLM's utility endpoints: `RequestRouter.default_model`), then
        the target of the rewrite rule for it (`routing.model_rewrite`, drawn now), else the
        model its header `x-llm-d-model-name-rewrite` names; the client's in `model_asked`."""
        if not req.model:
            req = replace(req, model=self.router.default_model(req.api))
        target = self.rewrites.target(req.model) if self.rewrites else None
        if target is None and headers is not None:
            target = control_header(headers, MODEL_REWRITE)
        if target is None or target == req.model:
            return req
        return replace(req, model=target, model_asked=req.model)

    @property
    def tokenizing(self) -> bool:
        """Whether prompts are tokenized: a tokenizer is configured and the precise index
        follows some backend (its events have arrived)."""
        return self._tokenize and bool(self.ledger.precise.block_sizes())

    async def token_ids(self, req: InferenceRequest) -> list[int] | None:
        """The prompt's token ids as the engine will see them: the body's own when it gives
        ids (`input_ids`, a prompt of ids), else when `tokenizing` and the model has a
        tokenizer; else None (routing keeps the byte approximation)."""
        ids = prompt_token_ids(req)
        if ids is not None or req.prompt is None or not self.tokenizing:
            return ids
        tokenizer = self._tokenizers.for_model(req.model)
        return await tokenizer.token_ids(req) if tokenizer is not None else None

    async def pin(self, response_id: str | None) -> Pin | None:
        """Where the stored response `response_id` lives, if known (`ResponseAffinity.pin`:
        here, else one Redis read)."""
        if self.affinity is None or response_id is None:
            return None
        return await self.affinity.pin(response_id)

    def pick(
        self,
        rec: RequestRecord,
        req: InferenceRequest,
        headers: Mapping[str, str],
        *,
        subset: Collection[str] | None = None,
        token_ids: Sequence[int] | None = None,
        pin: Pin | None = None,
    ) -> Route:
        """Route `req` (among `subset` when given; to `pin`'s backend alone when given); a
        `GatewayError` if it cannot be."""
        rec.request, rec.model, rec.stream = req, req.model, req.stream
        if (trace := rec.trace) is not None:
            trace.route_started()
        if pin is None:  # nothing for `_pinned` to count
            route = self.router.route(
                req, headers, rec.request_id, subset=subset, token_ids=token_ids
            )
        else:
            route = self._route_pinned(
                rec, req, headers, subset=subset, token_ids=token_ids, pin=pin
            )
        return self._picked(rec, route)

    def _route_pinned(
        self,
        rec: RequestRecord,
        req: InferenceRequest,
        headers: Mapping[str, str],
        *,
        subset: Collection[str] | None,
        token_ids: Sequence[int] | None,
        pin: Pin,
    ) -> Route:
        return self._pinned(
            pin,
            lambda: self.router.route(
                req, headers, rec.request_id, subset=subset, token_ids=token_ids, pin=pin
            ),
        )

    def pick_stored(
        self,
        rec: RequestRecord,
        response_id: str,
        pin: Pin | None,
        *,
        stream: bool = False,
        subset: Collection[str] | None = None,
    ) -> Route:
        """Route a request on the stored response `response_id` itself to its backend (`pin`;
        not known while affinity is on: a `ResponseNotFoundError`, as the engine answers)."""
        if pin is None and self.affinity is not None and self.affinity.enabled:
            raise ResponseNotFoundError(response_id)
        rec.stream = stream
        if (trace := rec.trace) is not None:
            trace.route_started()
        route = self._pinned(
            pin,
            lambda: self.router.stored(rec.request_id, pin, stream=stream, subset=subset),
        )
        return self._picked(rec, route)

    def _pinned(self, pin: Pin | None, decide: Callable[[], Route]) -> Route:
        """`decide()`, counting why a pinned request could not go to its backend."""
        try:
            return decide()
        except GatewayError as exc:
            if pin is not None and self.affinity is not None:
                gone = isinstance(exc, ResponseNotFoundError)
                self.affinity.count("gone" if gone else "unavailable")
                log.warning("stored response %s: %s", pin.response_id, exc.message)
            raise

    def _picked(self, rec: RequestRecord, route: Route) -> Route:
        trace = rec.trace
        if trace is not None:
            trace.routed(route.decision, len(route.request.prefix_hashes))
        rec.policy, rec.session = route.decision.profile, route.request.session_key
        rec.reason = route.reason
        self.metrics.count_decision(route.decision, route.reason, route.seconds)
        if (pd := route.pd) is not None:
            self.metrics.pd_decisions.labels("split" if pd.split else "local", pd.why).inc()
        return route

    def learns(self, rec: RequestRecord) -> bool:
        """Whether `rec`'s answer makes a stored response whose backend is to be learnt."""
        a, req = self.affinity, rec.request
        return a is not None and a.enabled and req is not None and req.stores

    async def stored(self, d: Attempt, response_id: str) -> None:
        """`d`'s backend answered a `store`d Responses request with `response_id`: follow-ups
        go there (told to Redis before the answer ends, when shared)."""
        if self.affinity is not None:
            await self.affinity.remember(response_id, d.endpoint.id)

    async def deleted(self, response_id: str) -> None:
        """The stored response `response_id` was deleted on its backend."""
        if self.affinity is not None:
            await self.affinity.forget(response_id)

    def finish(self, rec: RequestRecord) -> None:
        """The request is over (`rec.status` set by the transport; 499 if the client left),
        answered or refused (before routing too: 401, 429, 413, ...): metrics, the access-log
        line, the trace, and the recorder's line if it succeeded."""
        now = self.clock()
        if rec.client_gone:
            rec.status = 499  # client closed request (nginx's convention)
        backend = rec.backend or "none"
        self.metrics.requests_by(rec.model or "", backend, str(rec.status)).inc()
        if rec.backend:
            self.metrics.duration_by(rec.model or "", backend).observe(now - rec.started)
        self.metrics.count_tokens(rec)
        if self._access_log:
            log_request(rec, now)
        if (trace := rec.trace) is not None and self.tracer is not None:
            trace.backend = rec.backend
            outcome = Outcome(
                rec.status, rec.model, rec.stream, rec.ttft_s, rec.usage, rec.error,
                rec.client, rec.request_id,
            )  # fmt: skip
            self.tracer.finish(trace, outcome)
        ok = 0 < rec.status < 400 and not (rec.client_gone or rec.error)
        if self.recorder is not None and ok and rec.request is not None:
            self.recorder.record(
                rec.request,
                arrival=rec.started,
                session=rec.session,
                output_tokens=rec.output_tokens,
                ttft_s=rec.ttft_s,
            )

    # -- one attempt -------------------------------------------------------------------
    def dispatch(
        self,
        rec: RequestRecord,
        route: Route,
        backend: Backend,
        attempt: int = 1,
        *,
        leg: str = "whole",
    ) -> Attempt:
        """`route`'s request goes to `backend`: counted in flight there, its prompt's blocks
        placed and its predicted prefill queued (`leg`: a split request's `prefill` or
        `decode` leg; the decode leg queues no prefill, and an SGLang decode-only backend
        keeps no prefix cache)."""
        record = leg != "decode" or not self._pd_pushes or backend.spec.role != "decode"
        d = self.ledger.dispatch(backend, route.request, self.clock(), leg=leg, record=record)
        backend.in_flight += 1
        backend.dispatched += 1
        if leg == "prefill":
            rec.prefill_backend = backend.id
            return d
        if leg == "decode" and route.pd is not None:
            d.moved_tokens = route.pd.moved_tokens
        rec.backend, rec.attempts = backend.id, attempt
        if (trace := rec.trace) is not None and backend.id == route.decision.target:
            trace.matched_blocks = d.matched
        return d

    def answered(self, d: Attempt, status: int) -> None:
        """The backend answered with `status`: an error status means it did not take the
        prompt; 502/503/504 count against it."""
        if status >= 400:
            self.ledger.withdraw(d)
        if status in FAILURE_STATUSES:
            self.metrics.upstream_errors.labels(d.endpoint.id, "status_5xx").inc()
            self._record_failure(d.endpoint, f"backend answered {status}")

    def settled(self, d: Attempt) -> None:
        """The answer came whole (not streamed): the request's prefill is done."""
        self.ledger.first_token(d, None)

    def event(self, rec: RequestRecord, d: Attempt) -> None:
        """A streamed event with data came: the first is the time to first token."""
        now = self.clock()
        last = rec.last_event
        if d.leg == "lookup":  # a stored response replayed: no prefill to learn from
            self.ledger.first_token(d, None)
        elif last is None:
            rec.ttft_s = ttft = now - rec.started
            self.metrics.ttft_by(rec.model or "", d.endpoint.id).observe(ttft)
            if d.leg == "decode":
                self._transferred(rec, d, now - d.at)
            else:
                self.ledger.first_token(d, now - d.at)
        else:
            self.metrics.itl_by(rec.model or "", d.endpoint.id).observe(now - last)
        rec.last_event = now

    def prefilled(self, rec: RequestRecord, d: Attempt, usage: Usage | None) -> None:
        """A split request's prefill backend answered whole: its time is the prefill's
        (a TTFT point on its line), its cached tokens the request's real cache hit."""
        self.ledger.first_token(d, self.clock() - d.at)
        rec.prefill_usage = usage
        if usage is not None and usage.prompt_tokens is not None:
            check = self.ledger.observe(d, usage)
            if check is not None:
                self.metrics.count_cache_check(d.endpoint.id, usage.prompt_tokens, check)
        d.endpoint.state.record_upstream_success()

    def prefill_failed(self, rec: RequestRecord, d: Attempt) -> None:
        """The prefill leg gave nothing usable: the decode backend prefills alone."""
        self.metrics.pd_fallbacks.labels(d.endpoint.id).inc()
        rec.prefill_backend = None

    def decode_failed(self, rec: RequestRecord, d: Attempt) -> None:
        """The decode leg answered 5xx with P's handoff (it could not load the KV): it is
        asked again without it, and prefills alone."""
        self.metrics.pd_fallbacks.labels(rec.prefill_backend or d.endpoint.id).inc()
        rec.prefill_backend, rec.prefill_usage = None, None

    def completed(self, rec: RequestRecord, d: Attempt, status: int, usage: Usage | None) -> None:
        """The whole answer was relayed: grade the index's prediction against the cached
        tokens it reported; a passive success unless it was a 502/503/504. A decode leg's
        cached tokens are what it received, not a cache hit, and a batch's are not the routed
        prompt's: neither is graded. A lookup's usage is the stored response's: not kept."""
        if d.leg == "lookup":  # the stored response's usage, not this request's
            if status not in FAILURE_STATUSES:
                d.endpoint.state.record_upstream_success()
            return
        rec.usage = usage
        if d.leg == "decode":
            if status not in FAILURE_STATUSES:
                d.endpoint.state.record_upstream_success()
            return
        batch = rec.request is not None and rec.request.batch
        if status < 400 and usage is not None and usage.prompt_tokens is not None and not batch:
            check = self.ledger.observe(d, usage)
            if check is not None:
                self.metrics.count_cache_check(d.endpoint.id, usage.prompt_tokens, check)
        if status not in FAILURE_STATUSES:
            d.endpoint.state.record_upstream_success()

    def unanswered(self, d: Attempt, err: UpstreamError, detail: str) -> None:
        """No answer (connect error, timeout, reset): the backend did not take the prompt."""
        self.ledger.withdraw(d)
        self.broke(d, err, detail)

    def broke(self, d: Attempt, err: UpstreamError, detail: str) -> None:
        """The upstream failed (before or after the answer started): against the backend."""
        self.metrics.upstream_errors.labels(d.endpoint.id, error_kind(err)).inc()
        log.warning("upstream failure (%s): %s", err.code, detail)
        self._record_failure(d.endpoint, detail)

    def overloaded(self, d: Attempt) -> None:
        """No upstream connection slot: the gateway's own overload, held against nobody."""
        self.ledger.withdraw(d)

    def skipped(self, d: Attempt) -> None:
        """The proxy sent the request elsewhere (the picked backend refused or failed)."""
        self.ledger.withdraw(d)
        self.end(d)
        self._record_failure(d.endpoint, "skipped by the proxy")

    def end(self, d: Attempt) -> None:
        """The attempt is over: out of the in-flight count, its prefill settled if it was not
        yet, and the shared state told that the load changed."""
        d.endpoint.in_flight -= 1
        self.ledger.ended(d)

    def _transferred(self, rec: RequestRecord, d: Attempt, seconds: float) -> None:
        """A decode leg's first token: its blocks arrived. A point on the transfer line when
        the gateway ran P to its end first (vLLM's protocol; with SGLang's, or D's sidecar
        running P, the time holds P's prefill too)."""
        self.ledger.first_token(d, None)
        self.metrics.pd_transfer_seconds.observe(seconds)
        planner = self.router.planner
        if planner is not None and rec.prefill_usage is not None and not self._pd_pushes:
            planner.observe_transfer(d.moved_tokens, seconds)

    @property
    def _pd_pushes(self) -> bool:
        """The pool's P/D protocol is SGLang's (decode backends keep no prefix cache)."""
        planner = self.router.planner
        return planner is not None and planner.section.protocol == "sglang"

    def _record_failure(self, backend: Backend, message: str) -> None:
        if backend.state.record_upstream_failure(self.pool.now(), message):
            self.metrics.ejections_by(backend.id).inc()
            log.warning("backend %s ejected after upstream failures: %s", backend.id, message)
