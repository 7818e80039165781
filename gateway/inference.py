"""The front door's inference endpoints (`POST /v1/chat/completions`, SGLang's `/generate`, ...):
read and parse the body, admit, route through the `Director`, proxy with failover (the app
starts and finishes the request's record, and answers its errors).
`stored` serves the requests on a stored response itself (`GET`/`DELETE /v1/responses/{id}`,
`POST .../cancel`): relayed to the backend holding it, without admission.

The body is capped at `server.max_body_bytes` (413), must be JSON (415) and is parsed once;
bad input is an error in the API's shape (`ERROR_SHAPES`). A client that leaves cancels the
upstream request; a shutdown ends what is left after the grace period (`gateway.lifecycle`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine
from typing import Any

from gateway.access_log import clip
from gateway.asgi import (
    Receive,
    Scope,
    TrackedSend,
    check_json_content_type,
    disconnect_signal,
    header_map,
    read_body,
    run_until_disconnect,
    send_bytes,
)
from gateway.errors import (
    ClientDisconnectedError,
    GatewayError,
    MethodNotAllowedError,
    NoHealthyBackendError,
    PayloadTooLargeError,
)
from gateway.inference_request import API_BY_PATH
from gateway.lifecycle import Drain
from gateway.proxy import Proxy
from gateway.request_record import RequestRecord
from gateway.responses.ids import STORED_METHODS, object_path, replays
from gateway.router import Route
from gateway.runtime import Runtime

Forward = Callable[
    [Scope, Receive, TrackedSend, dict[str, str], RequestRecord], Coroutine[Any, Any, None]
]

log = logging.getLogger(__name__)


class InferenceHandler:
    """One inference request through admission, the director and the proxy."""

    def __init__(self, runtime: Runtime, drain: Drain) -> None:
        self._director = runtime.director
        self._admission = runtime.admission
        self._limit = runtime.config.server.max_body_bytes  # restart-only
        self._drain = drain
        self.proxy: Proxy | None = None  # while the gateway runs (its upstream client)

    async def __call__(
        self, scope: Scope, receive: Receive, send: TrackedSend, rec: RequestRecord
    ) -> None:
        try:  # `_run` with `_forward`, written out: one coroutine frame fewer per request
            await self._forward(scope, receive, send, header_map(scope), rec)
        finally:
            self._admission.release(scope, rec)

    async def stored(
        self, scope: Scope, receive: Receive, send: TrackedSend, rec: RequestRecord
    ) -> None:
        """A request on a stored response (`/v1/responses/{id}`, `.../cancel`)."""
        where = object_path(scope["path"])
        allowed = STORED_METHODS[where[1]] if where is not None else ()
        if scope["method"] not in allowed:
            raise MethodNotAllowedError(
                f"method {scope['method']} not allowed on {scope['path']}", allow=allowed
            )
        await self._run(scope, receive, send, rec, self._forward_stored)

    async def _run(
        self,
        scope: Scope,
        receive: Receive,
        send: TrackedSend,
        rec: RequestRecord,
        forward: Forward,
    ) -> None:
        """`forward` the request; its place in admission goes back however it ends (the app
        answers its errors and finishes `rec`)."""
        try:
            await forward(scope, receive, send, header_map(scope), rec)
        finally:
            self._admission.release(scope, rec)

    async def _forward(
        self,
        scope: Scope,
        receive: Receive,
        send: TrackedSend,
        headers: dict[str, str],
        rec: RequestRecord,
    ) -> None:
        check_json_content_type(headers.get("content-type"))
        limit = self._limit
        declared = headers.get("content-length", "")
        if declared.isdigit() and int(declared) > limit:
            raise PayloadTooLargeError(f"request body exceeds the limit of {limit} bytes")
        body = await read_body(receive, limit)
        req = await self._director.parse(API_BY_PATH[scope["path"]], body, headers)
        rec.model, rec.stream = req.model, req.stream
        if not await self._admission.acquire(scope, receive, headers, len(body), rec):
            return  # the client left while queued
        director = self._director
        ids = await director.token_ids(req)
        pin = await director.pin(req.previous_response_id)
        route = director.pick(rec, req, headers, token_ids=ids, pin=pin)
        await self._relay(scope, receive, send, rec, route=route, body=body)

    async def _forward_stored(
        self,
        scope: Scope,
        receive: Receive,
        send: TrackedSend,
        headers: dict[str, str],
        rec: RequestRecord,
    ) -> None:
        body = await read_body(receive, self._limit)  # none expected; read to the end
        where = object_path(scope["path"])
        assert where is not None  # `stored` checked it
        response_id, method = where[0], scope["method"]
        director = self._director
        stream = replays(scope["query_string"].decode("latin-1"))
        pin = await director.pin(response_id)
        route = director.pick_stored(rec, response_id, pin, stream=stream)
        await self._relay(
            scope, receive, send, rec, route=route, body=body, method=method, lookup=True
        )
        if method == "DELETE" and 200 <= rec.status < 300 and not rec.error:
            await director.deleted(response_id)

    async def _relay(
        self,
        scope: Scope,
        receive: Receive,
        send: TrackedSend,
        rec: RequestRecord,
        *,
        route: Route,
        body: bytes,
        method: str = "POST",
        lookup: bool = False,
    ) -> None:
        """Proxy the routed request until it is answered, the client leaves or the shutdown
        grace ends."""
        if (proxy := self.proxy) is None:
            raise NoHealthyBackendError("gateway is starting or stopping")
        work = proxy.forward(
            route,
            path=scope["path"],
            query=scope["query_string"],
            raw_headers=scope["headers"],
            body=body,
            send=send,
            rec=rec,
            method=method,
            lookup=lookup,
        )
        watched = run_until_disconnect(work, receive, send.is_finished, disconnect_signal(scope))
        left = await self._drain.run(watched, send)
        rec.client_gone = left is True
        if left is None:
            rec.error = rec.error or "ended by the shutdown grace"


async def send_error(
    send: TrackedSend,
    exc: GatewayError,
    extra: list[tuple[bytes, bytes]] | None = None,
    *,
    shape: str = "openai",
) -> None:
    """The error as the client's API expects it (`shape`: `GatewayError.body`'s), unless the
    response already started."""
    if isinstance(exc, ClientDisconnectedError):
        return  # nobody to answer
    if send.started:
        log.warning("error after the response started, dropping: %s", clip(exc.message))
        return
    body = exc.body(shape)
    await send_bytes(send, exc.status, body, headers=exc.headers() + (extra or []))
