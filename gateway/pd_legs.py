"""The prefill leg of a split prefill/decode request, and the bodies each protocol sends.

vLLM (NixlConnector, pull): P gets a copy of the body asking for one token, not streamed,
with `kv_transfer_params` asking it to keep the KV for a remote decode; its answer's
`kv_transfer_params` go verbatim into D's body (the same `X-Request-Id` on both). A P leg
that fails (no answer, an error status, no params, or `prefill_timeout_s`) leaves D to
prefill alone, counted in `kvgate_pd_prefill_fallbacks_total`.

SGLang (bootstrap, push): P and D get the same body with `bootstrap_host` (P's host),
`bootstrap_port` (P's, else 8998) and a random `bootstrap_room`, at the same time; P's answer
is read and dropped; with data-parallel ranks D also gets P's rank (`disagg_prefill_dp_rank`)
and each leg its own (`gateway.dp_rank`). A P leg still running when D's answer ends, or
when the client leaves, is cancelled (its connection closed: the engine aborts it).
"""

from __future__ import annotations

import asyncio
import logging
import random
from typing import Any
from urllib.parse import urlsplit

import orjson

from gateway.director import Attempt, Director
from gateway.dp_rank import for_rank
from gateway.errors import UpstreamTimeoutError
from gateway.http.client import UpstreamClient
from gateway.http.http1 import HttpClientError
from gateway.request_record import RequestRecord
from gateway.router import Route
from gateway.tracing.spans import end_span
from gateway.upstream import failure_detail, map_client_error
from gateway.usage import Usage, parse_last_usage, usage_from
from health.pool import Backend
from health.ranks import PREFILL_RANK_FIELD
from routing.nixl_bodies import decode_request, prefill_request

log = logging.getLogger(__name__)

SGLANG_BOOTSTRAP_PORT = 8998  # SGLang's default
MAX_PREFILL_ANSWER = 1 << 20  # one token's answer: far below this


def vllm_prefill_body(data: dict[str, Any]) -> bytes:
    """P's copy of the request: one token, whole, keep the KV for a remote decode."""
    return orjson.dumps(prefill_request(data))


def vllm_decode_body(body: bytes, params: dict[str, Any]) -> bytes:
    """D's request: the client's body with P's `kv_transfer_params`, verbatim."""
    return orjson.dumps(decode_request(orjson.loads(body), params))


def sglang_body(body: bytes, prefill: Backend, room: int) -> bytes:
    """The body P and D both get: the client's, with P's bootstrap address and the room."""
    data = orjson.loads(body)
    data["bootstrap_host"] = urlsplit(prefill.spec.url).hostname or ""
    data["bootstrap_port"] = prefill.spec.bootstrap_port or SGLANG_BOOTSTRAP_PORT
    data["bootstrap_room"] = room
    if prefill.spec.rank is not None:  # D is told P's rank; each leg gets its own rank
        data[PREFILL_RANK_FIELD] = prefill.spec.rank
    return orjson.dumps(data)


def new_room(rng: random.Random) -> int:
    return rng.getrandbits(63)


class PrefillLeg:
    """Sends and accounts the prefill leg of one split request."""

    def __init__(self, director: Director, client: UpstreamClient, timeout_s: float) -> None:
        self._director = director
        self._client = client
        self._timeout_s = timeout_s

    async def vllm(
        self,
        route: Route,
        rec: RequestRecord,
        target: str,
        headers: list[tuple[bytes, bytes]],
        body: bytes,
    ) -> bytes | None:
        """Run P; D's body with P's `kv_transfer_params`, or None: D prefills alone."""
        backend = self._backend(route)
        if backend is None:
            return None
        try:
            p_body = vllm_prefill_body(orjson.loads(body))
        except (orjson.JSONDecodeError, TypeError, AttributeError):
            return None
        answer = await self._run(route, rec, backend, target=target, headers=headers, body=p_body)
        if answer is None:
            return None
        d, data = answer
        params = data.get("kv_transfer_params") if isinstance(data, dict) else None
        if not isinstance(params, dict):
            log.warning("prefill backend %s answered without kv_transfer_params", backend.id)
            self._director.prefill_failed(rec, d)
            return None
        return vllm_decode_body(body, params)

    async def sglang(
        self,
        route: Route,
        rec: RequestRecord,
        target: str,
        headers: list[tuple[bytes, bytes]],
        body: bytes,
    ) -> None:
        """Run P alongside D (the body already has the bootstrap fields); its answer dropped."""
        backend = self._backend(route)
        if backend is not None:
            await self._run(route, rec, backend, target=target, headers=headers, body=body)

    def _backend(self, route: Route) -> Backend | None:
        prefill = route.prefill
        return self._director.pool.find(prefill) if prefill is not None else None

    async def _run(
        self,
        route: Route,
        rec: RequestRecord,
        backend: Backend,
        *,
        target: str,
        headers: list[tuple[bytes, bytes]],
        body: bytes,
    ) -> tuple[Attempt, Any] | None:
        """Send P its body and read the whole answer: the attempt and the parsed JSON (None
        for an event stream), or None when it failed (accounted)."""
        director = self._director
        d = director.dispatch(rec, route, backend, leg="prefill")
        if backend.spec.rank is not None:
            headers, body = for_rank(backend, headers, body)
        span = rec.trace.upstream(backend.id, backend.spec.url, 0) if rec.trace else None
        if span is not None and rec.trace is not None:
            headers = headers + rec.trace.propagation(span.span_id)
        error: str | None = None
        try:
            async with asyncio.timeout(self._timeout_s):
                resp = await self._client.send(
                    backend.spec.url, target, "POST", headers, body, first_byte_timeout=None
                )
                try:
                    if span is not None:
                        span.status = resp.status_code
                    director.answered(d, resp.status_code)
                    raw = await _read_all(resp.aiter_raw())
                finally:
                    await resp.aclose()
            if resp.status_code >= 400:
                error = f"prefill backend answered {resp.status_code}"
                director.prefill_failed(rec, d)
                return None
            data = _json(raw)
            usage = _usage(data, raw)
            director.prefilled(rec, d, usage)
            return d, data
        except HttpClientError as exc:
            err = map_client_error(exc)
            error = err.message
            director.unanswered(d, err, failure_detail(exc, backend.id))
            director.prefill_failed(rec, d)
            return None
        except TimeoutError:
            error = "prefill leg timed out"
            director.unanswered(d, UpstreamTimeoutError(error), f"{backend.id}: {error}")
            director.prefill_failed(rec, d)
            return None
        finally:
            director.end(d)
            if span is not None:
                if error is not None and span.error is None:
                    span.error = error
                end_span(span, None)


async def _read_all(chunks: Any) -> bytes:
    out = bytearray()
    async for data in chunks:
        out += data
        if len(out) > MAX_PREFILL_ANSWER:
            break
    return bytes(out)


def _json(raw: bytes) -> Any:
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None  # an event stream (SGLang's P answering a streamed request)


def _usage(data: Any, raw: bytes) -> Usage | None:
    if isinstance(data, dict):
        usage = data.get("usage")
        return usage_from(usage) if isinstance(usage, dict) else None
    return parse_last_usage(raw[-8192:])
