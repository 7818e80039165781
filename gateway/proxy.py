"""Forward one routed request upstream, with failover, and relay the answer unbuffered.

Failover: a connect error, no response head within the first-byte timeout (a hung backend), or
a 502/503 answer, before any byte reached the client moves on to the next-ranked backend, up to
`max_attempts` tries, while the retry budget allows; a retry it denies returns its error. Once
the response has started nothing is retried; a stream that breaks midway ends, on an event
boundary, with an SSE error event. A streaming chat or completions request whose client did not
ask for usage is forwarded asking for it, and the usage event this adds is left out of what the
client receives. Every step of an attempt is accounted by the `Director`, which learns a stored
response's id (`gateway.responses.ids`) before the chunk that holds it goes out. A rewritten
request goes with the target model in its body and in `x-llm-d-model-name-rewrite`; its answer
names the model asked. A data-parallel rank is named to its engine on each attempt
(`gateway.dp_rank`). A split prefill/decode request (`Route.prefill`) first runs its prefill
leg (`gateway.pd_legs`: vLLM's before D, SGLang's alongside); the attempts then go to the
decode backends as the decode leg; the client's `cached_tokens` is P's real cache hit.
"""

from __future__ import annotations

import asyncio
import random
import re
from dataclasses import dataclass, replace

from gateway.asgi import Send
from gateway.control_headers import MODEL_REWRITE
from gateway.director import Attempt, Director
from gateway.dp_rank import for_rank
from gateway.errors import GatewayError, NoHealthyBackendError, UpstreamError
from gateway.header_policy import HeaderPolicy
from gateway.http.client import UpstreamClient, UpstreamResponse
from gateway.http.http1 import HttpClientError, PoolTimeout
from gateway.model_names import ModelNameRestorer, with_model
from gateway.output_tokens import OutputTokenCounter
from gateway.pd_legs import PrefillLeg, new_room, sglang_body
from gateway.request_record import RequestRecord
from gateway.responses.ids import ResponseIdReader
from gateway.retry_budget import RetryBudget
from gateway.router import Route
from gateway.sse_events import EventAligner
from gateway.tracing.spans import UpstreamSpan, end_span
from gateway.upstream import (
    FirstByteTimeouts,
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
from routing.frozen import fast_init

_RETRY_STATUSES = frozenset({502, 503})
_CACHED = re.compile(rb'("cached_tokens"\s*:\s*)(null|\d+)')
PREFILL_GRACE_S = 5.0  # SGLang: how long P's answer may trail D's before it is cancelled


@fast_init
@dataclass(frozen=True, slots=True)
class _Outgoing:
    """The request as every attempt sends it."""

    target: str
    headers: list[tuple[bytes, bytes]]
    body: bytes
    first_byte_timeout: float | None
    method: str = "POST"


class BrokenBodyError(Exception):
    """A non-streaming upstream body broke after the response started; the connection must be
    dropped so the client sees the truncation."""


class Proxy:
    """Sends a routed request to its ranked backends in turn and relays the first answer."""

    def __init__(
        self,
        director: Director,
        client: UpstreamClient,
        *,
        max_attempts: int,
        count_output: bool = False,
        first_byte: FirstByteTimeouts | None = None,
        budget: RetryBudget | None = None,
        headers: HeaderPolicy | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self._director = director
        self._pool = director.pool
        self._metrics = director.metrics
        self._headers = headers or HeaderPolicy()
        self._count_output = count_output
        self._client = client
        self._max_attempts = max_attempts
        self._first_byte = first_byte or FirstByteTimeouts()
        self._budget = budget
        self._rng = rng or random.Random()
        planner = director.router.planner
        self._pd_protocol = planner.section.protocol if planner is not None else "vllm"
        timeout = planner.section.prefill_timeout_s if planner is not None else 60.0
        self._prefill = PrefillLeg(director, client, timeout)

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
        method: str = "POST",
        lookup: bool = False,
    ) -> None:
        """Relay `route`'s request (`lookup`: one on a stored response itself, e.g. a GET)."""
        attempts = route.decision.ranked[: self._max_attempts]
        trace = rec.trace
        headers = request_headers(
            raw_headers, rec.request_id, self._headers, rec.client, rec.scheme,
            traced=trace is not None,
        )  # fmt: skip
        target = path + ("?" + query.decode("latin-1") if query else "")
        if (req := rec.request) is not None and req.model_asked is not None:
            body = with_model(body, req.model)
            headers = [(k, v) for k, v in headers if k.lower().decode() not in MODEL_REWRITE]
            headers.append((MODEL_REWRITE[0].encode(), req.model.encode()))
        strip_usage = False
        if route.request.stream and route.request.api in STREAM_USAGE_APIS:
            asked = ask_for_usage(body)
            if asked is not None:
                body, strip_usage = asked, True
        fb = self._first_byte
        timeout = fb.stream if route.request.stream else fb.non_stream
        out = _Outgoing(target, headers, body, timeout, method)
        if self._budget is not None:
            self._budget.record_request()
        leg, prefill_task, whole = "lookup" if lookup else "whole", None, out
        if route.prefill is not None:
            out, leg, prefill_task = await self._split(route, rec, out)
        try:
            await self._attempts(
                route, attempts, out, send, rec, strip_usage=strip_usage, leg=leg,
                alone=whole if leg == "decode" and self._pd_protocol == "vllm" else None,
            )  # fmt: skip
        except BaseException:
            if prefill_task is not None:
                prefill_task.cancel()  # the client left or every attempt failed: abort P
            raise
        if prefill_task is not None:
            await _settle(prefill_task)

    async def _split(
        self, route: Route, rec: RequestRecord, out: _Outgoing
    ) -> tuple[_Outgoing, str, asyncio.Task[None] | None]:
        """Start the prefill leg: what the decode backends get, and their leg (`whole` when
        P failed and D prefills alone), plus SGLang's running P leg."""
        if self._pd_protocol == "vllm":
            body = await self._prefill.vllm(route, rec, out.target, out.headers, out.body)
            if body is None:
                return out, "whole", None
            return replace(out, body=body), "decode", None
        prefill = self._pool.find(route.prefill or "")
        if prefill is None:
            return out, "whole", None
        body = sglang_body(out.body, prefill, new_room(self._rng))
        task = asyncio.create_task(self._prefill.sglang(route, rec, out.target, out.headers, body))
        return replace(out, body=body), "decode", task

    async def _attempts(
        self,
        route: Route,
        attempts: tuple[str, ...],
        out: _Outgoing,
        send: Send,
        rec: RequestRecord,
        *,
        strip_usage: bool,
        leg: str,
        alone: _Outgoing | None = None,
    ) -> None:
        """Try the ranked backends in turn. `alone`: a vLLM decode leg's request without P's
        params, sent once to the same backend if it answers 5xx (it could not load P's KV,
        e.g. a failed NIXL handshake): it prefills alone."""
        trace = rec.trace
        director = self._director
        last_error: GatewayError | None = None
        for i, backend_id in enumerate(attempts):
            backend = self._pool.find(backend_id)
            if backend is None or (i and backend.draining):  # left or drained since then
                continue
            more = i + 1 < len(attempts)
            attempt = director.dispatch(rec, route, backend, i + 1, leg=leg)
            span = None
            if trace is not None:
                span = trace.upstream(backend_id, backend.spec.url, i + 1)
            redo = False
            try:
                opened = await self._open(attempt, out, rec, more=more, span=span)
                if isinstance(opened, UpstreamError):
                    last_error = opened
                    continue
                try:
                    status = opened.status_code
                    director.answered(attempt, status)
                    if alone is not None and status >= 500 and self._may_retry(rec):
                        redo = True
                    elif status in _RETRY_STATUSES and more and self._may_retry(rec):
                        continue
                    else:
                        await self._relay(attempt, opened, send, rec, strip_usage)
                        return
                finally:
                    await opened.aclose()
            finally:
                director.end(attempt)
                if span is not None:
                    end_span(span, rec.error if rec.backend == span.backend else None)
            if redo and alone is not None:
                director.decode_failed(rec, attempt)
                await self._attempts(
                    route, attempts[i:], alone, send, rec, strip_usage=strip_usage, leg="whole"
                )
                return
        if last_error is None:  # every ranked backend left the pool before it was tried
            raise NoHealthyBackendError("the chosen backends left the pool")
        raise last_error

    async def _open(
        self,
        attempt: Attempt,
        out: _Outgoing,
        rec: RequestRecord,
        *,
        more: bool,
        span: UpstreamSpan | None = None,
    ) -> UpstreamResponse | UpstreamError:
        """Send the request to the attempt's backend: its response head, or the error to
        fail over from (raised instead when there is no failover). With `span`, the engine
        gets a `traceparent` naming it as the parent."""
        backend = attempt.endpoint
        headers, body = out.headers, out.body
        if backend.spec.rank is not None:
            headers, body = for_rank(backend, headers, body)
        if span is not None and rec.trace is not None:
            headers = headers + rec.trace.propagation(span.span_id)
        try:
            resp = await self._client.send(
                backend.spec.url,
                out.target,
                out.method,
                headers,
                body,
                first_byte_timeout=out.first_byte_timeout,
            )
        except PoolTimeout as exc:
            self._director.overloaded(attempt)
            if rec.attempts == 1:
                rec.backend = None  # no backend saw it: keep the 503 off their metrics
            overloaded = overloaded_error(exc)
            if span is not None:
                span.error = overloaded.message
            raise overloaded from None
        except HttpClientError as exc:
            err = map_client_error(exc)
            if span is not None:
                span.error = err.message
            self._director.unanswered(attempt, err, failure_detail(exc, backend.id))
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
        attempt: Attempt,
        resp: UpstreamResponse,
        send: Send,
        rec: RequestRecord,
        strip_usage: bool,
    ) -> None:
        backend = attempt.endpoint
        is_sse = (resp.header(b"content-type") or b"").startswith(b"text/event-stream")
        ok = resp.status_code < 400
        extra = [(b"x-request-id", rec.request_id.encode())]
        if (tag := self._headers.backend_tag(backend.id)) is not None:
            extra.append((b"x-kvgate-backend", tag))
            if attempt.leg == "decode" and rec.prefill_backend is not None:
                p_tag = self._headers.backend_tag(rec.prefill_backend)
                extra.append((b"x-kvgate-prefill-backend", p_tag or b""))
        rec.status = resp.status_code
        patch = _CachedPatch.of(attempt, rec, is_sse)
        req = rec.request
        asked = req.model_asked if req is not None else None
        restore = ModelNameRestorer(req.model, asked) if req is not None and asked else None
        headers = response_headers(resp.headers, extra)
        if (patch or restore) is not None and not is_sse:  # the body's length may change
            headers = [(k, v) for k, v in headers if k.lower() != b"content-length"]
        await send({"type": "http.response.start", "status": resp.status_code, "headers": headers})
        if not is_sse:
            self._director.settled(attempt)
        counter = OutputTokenCounter(is_sse) if self._count_output else None
        reader: UsageReader = UsageEventFilter() if strip_usage and is_sse and ok else UsageTap()
        aligner = EventAligner() if is_sse else None
        stores = ok and attempt.leg != "lookup" and self._director.learns(rec)
        ids = ResponseIdReader(is_sse) if stores else None
        try:
            await self._relay_body(
                attempt, resp, send, rec, aligner=aligner, reader=reader, counter=counter,
                patch=patch, ids=ids, restore=restore,
            )  # fmt: skip
        except HttpClientError as exc:
            err = map_client_error(exc)
            self._director.broke(attempt, err, failure_detail(exc, backend.id))
            rec.error = err.message
            if aligner is None:
                raise BrokenBodyError(err.message) from None
            event = aligner.error_event(_error_obj(err))
            await send({"type": "http.response.body", "body": event, "more_body": False})
            return
        usage = reader.usage()
        if patch is not None and usage is not None:
            usage = Usage(usage.prompt_tokens, patch.cached, usage.completion_tokens)
        if counter is not None:
            rec.output_tokens = counter.output_tokens(usage)
        self._director.completed(rec, attempt, resp.status_code, usage)

    async def _relay_body(
        self,
        attempt: Attempt,
        resp: UpstreamResponse,
        send: Send,
        rec: RequestRecord,
        *,
        aligner: EventAligner | None,
        reader: UsageReader,
        counter: OutputTokenCounter | None,
        patch: _CachedPatch | None = None,
        ids: ResponseIdReader | None = None,
        restore: ModelNameRestorer | None = None,
    ) -> None:
        """Relay the body as it arrives (what `reader` lets through; an event stream in whole
        events), each SSE data event told to the director (TTFT, inter-token latency); with
        `patch`, the usage's cached tokens replaced (a whole answer then relayed at its end);
        with `ids`, a stored response's id told to the director before it is relayed; with
        `restore`, the model named as the client asked."""
        director = self._director
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
            if patch is not None:
                chunk = patch.feed(chunk, ended)
            if restore is not None:
                chunk = restore.feed(chunk, ended)
            if not ended and not chunk:
                continue  # held back, or the usage event taken out
            # find(), not `in`: see gateway.http.client._request_head (bytes.__contains__).
            if (
                aligner is not None
                and chunk.find(b"data:") >= 0
                and not chunk.startswith(b"data: [DONE]")
            ):
                director.event(rec, attempt)
            if ids is not None and (stored := ids.feed(chunk, ended)) is not None:
                await director.stored(attempt, stored)  # known everywhere before it is relayed
            # The last chunk carries the end of the response: one write fewer.
            await send({"type": "http.response.body", "body": chunk, "more_body": not ended})
        if not ended:
            rest = reader.finish()
            if aligner is not None:
                rest = aligner.feed(rest) + aligner.finish()
            if patch is not None:
                rest = patch.feed(rest, True)
            if restore is not None:
                rest = restore.feed(rest, True)
            if ids is not None and (stored := ids.feed(rest, True)) is not None:
                await director.stored(attempt, stored)
            await send({"type": "http.response.body", "body": rest, "more_body": False})


class _CachedPatch:
    """A split request's answer with P's cached prompt tokens in its usage: D's count is the
    blocks it received, not a cache hit. Events are patched as they pass; a whole answer is
    held to its end (one token's relay time, the answer being whole anyway)."""

    __slots__ = ("_held", "_sse", "cached")

    def __init__(self, cached: int, sse: bool) -> None:
        self.cached = cached
        self._sse = sse
        self._held = bytearray()

    @classmethod
    def of(cls, attempt: Attempt, rec: RequestRecord, sse: bool) -> _CachedPatch | None:
        usage = rec.prefill_usage
        if attempt.leg != "decode" or usage is None or usage.cached_tokens is None:
            return None
        return cls(usage.cached_tokens, sse)

    def feed(self, chunk: bytes, ended: bool) -> bytes:
        if not self._sse:
            self._held += chunk
            if not ended:
                return b""
            chunk, self._held = bytes(self._held), bytearray()
        if b'"cached_tokens"' not in chunk:
            return chunk
        return _CACHED.sub(lambda m: m.group(1) + str(self.cached).encode(), chunk)


async def _settle(task: asyncio.Task[None]) -> None:
    """Let a concurrent prefill leg finish for a moment, then cancel it."""
    if not task.done():
        try:
            await asyncio.wait({task}, timeout=PREFILL_GRACE_S)
        finally:
            task.cancel()


def _error_obj(err: GatewayError) -> dict[str, str]:
    return {"message": err.message, "type": err.type, "code": err.code}
