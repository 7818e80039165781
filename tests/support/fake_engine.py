"""A vLLM-shaped OpenAI-compatible engine as a raw ASGI app, for integration tests.

Serves ``GET /health``, ``/v1/models``, ``/metrics`` and ``POST /v1/chat/completions``,
``/v1/completions`` (streaming or not), ``/v1/embeddings``, ``/v1/responses``. Generated text
is ``"<name>:tok0 <name>:tok1 ..."`` and every response carries ``x-fake-engine: <name>``,
so a test can tell which engine served it; ``x-request-id`` is echoed back.

Knobs (``fail_status``, ``health_status``, ``die_after_tokens``, delays, ``models``,
``waiting``, ``kv_cache_usage``) are plain attributes that a test may change at any time,
from any thread. Observations (``requests``, ``completed``, ``cancelled``, ``died``,
``running``) are plain attributes too: they are written on the server's event loop and
single reads of them from the test thread are safe under the GIL.
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from tests.support import vllm_payloads as shapes
from tests.support.asgi_types import Message, Receive, Scope, Send
from tests.support.exchange import Exchange, pause, read_body, watching_disconnect

_PROMETHEUS = b"text/plain; version=0.0.4; charset=utf-8"
_Handler = Callable[[Exchange, Any], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class ReceivedRequest:
    """What the engine saw: ``headers`` lower-cased, ``body`` parsed JSON (None if not JSON)."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any


class Outcome(enum.Enum):
    """How an inference request ended, as counted by ``completed``/``cancelled``/``died``."""

    COMPLETED = "completed"
    CANCELLED = "cancelled"
    DIED = "died"


@dataclass(frozen=True, slots=True)
class _Generation:
    """One inference request, validated: what to generate and how to frame it."""

    kind: str  # "chat" | "completion"
    model: str
    texts: list[str]
    finish_reason: str
    prompt_tokens: int
    stream: bool
    include_usage: bool


class FakeEngine:
    """An OpenAI-compatible engine whose timing and failures a test controls."""

    def __init__(
        self,
        models: Sequence[str] = ("m1",),
        name: str = "e1",
        tokens: int = 5,
        token_delay: float = 0.0,
        ttft_delay: float = 0.0,
    ) -> None:
        self.name = name
        self.models: Sequence[str] = tuple(models)
        self.tokens = tokens
        self.token_delay = token_delay
        self.ttft_delay = ttft_delay
        self.fail_status: int | None = None
        self.health_status = 200
        self.die_after_tokens: int | None = None
        self.waiting = 0
        self.kv_cache_usage = 0.0

        self.requests: list[ReceivedRequest] = []
        self.completed = 0
        self.cancelled = 0
        self.died = 0
        self.running = 0

        self._routes: dict[str, tuple[str, _Handler]] = {
            "/health": ("GET", self._health),
            "/v1/models": ("GET", self._models),
            "/metrics": ("GET", self._metrics),
            "/v1/chat/completions": ("POST", self._chat),
            "/v1/completions": ("POST", self._completions),
            "/v1/embeddings": ("POST", self._embeddings),
            "/v1/responses": ("POST", self._responses),
        }

    def inference_requests(self) -> list[ReceivedRequest]:
        """The POSTs received (health, models and metrics GETs left out)."""
        return [r for r in self.requests if r.method == "POST"]

    async def app(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The ASGI 3 entry point (serve with ``interface="asgi3"``)."""
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        raw = await read_body(receive)
        body = _parse_json(raw)
        self.requests.append(ReceivedRequest(scope["method"], scope["path"], headers, body))

        extra = [(b"x-fake-engine", self.name.encode())]
        if "x-request-id" in headers:
            extra.append((b"x-request-id", headers["x-request-id"].encode("latin-1")))
        exchange = Exchange(receive, send, extra)

        route = self._routes.get(scope["path"])
        if route is None:
            await exchange.json(404, {"detail": "Not Found"})
        elif scope["method"] != route[0]:
            await exchange.json(405, {"detail": "Method Not Allowed"})
        elif raw and body is None:
            await exchange.json(400, shapes.error_body(400, "Request body is not valid JSON"))
        else:
            await route[1](exchange, body)

    # -- read-only endpoints -------------------------------------------------------------

    async def _health(self, exchange: Exchange, _body: Any) -> None:
        await exchange.text(self.health_status, "", b"text/plain; charset=utf-8")

    async def _models(self, exchange: Exchange, _body: Any) -> None:
        await exchange.json(200, shapes.models_body(self.models))

    async def _metrics(self, exchange: Exchange, _body: Any) -> None:
        text = shapes.metrics_text(self.models, self.running, self.waiting, self.kv_cache_usage)
        await exchange.text(200, text, _PROMETHEUS)

    # -- inference -----------------------------------------------------------------------

    async def _refuse(self, exchange: Exchange, body: Any) -> str | None:
        """Answer with an error and return None, or return the model to serve."""
        if self.fail_status is not None:
            message = f"fake engine {self.name} failing with {self.fail_status}"
            await exchange.json(self.fail_status, shapes.error_body(self.fail_status, message))
            return None
        if not isinstance(body, dict):
            await exchange.json(400, shapes.error_body(400, "Expected a JSON object"))
            return None
        model = body.get("model", self.models[0] if self.models else "")
        if model not in self.models:
            message = f"The model `{model}` does not exist."
            await exchange.json(404, shapes.error_body(404, message, param="model"))
            return None
        return str(model)

    async def _chat(self, exchange: Exchange, body: Any) -> None:
        model = await self._refuse(exchange, body)
        if model is None:
            return
        messages = body.get("messages")
        if not isinstance(messages, list):
            await exchange.json(400, shapes.error_body(400, "`messages` is required"))
            return
        prompt_tokens = sum(shapes.count_words(m.get("content")) for m in messages)
        await self._generate(exchange, self._plan("chat", model, body, prompt_tokens))

    async def _completions(self, exchange: Exchange, body: Any) -> None:
        model = await self._refuse(exchange, body)
        if model is None:
            return
        if "prompt" not in body:
            await exchange.json(400, shapes.error_body(400, "`prompt` is required"))
            return
        prompt_tokens = shapes.count_words(body["prompt"])
        await self._generate(exchange, self._plan("completion", model, body, prompt_tokens))

    async def _embeddings(self, exchange: Exchange, body: Any) -> None:
        model = await self._refuse(exchange, body)
        if model is None:
            return
        raw_input = body.get("input", "")
        inputs = [raw_input] if isinstance(raw_input, str) else [str(x) for x in raw_input]
        self.completed += 1
        await exchange.json(200, shapes.embeddings_response(model, inputs))

    async def _responses(self, exchange: Exchange, body: Any) -> None:
        model = await self._refuse(exchange, body)
        if model is None:
            return
        if body.get("stream"):
            message = "the fake engine does not stream /v1/responses"
            await exchange.json(400, shapes.error_body(400, message))
            return
        text = "".join(self._token_texts(self.tokens))
        input_tokens = shapes.count_words(body.get("input"))
        payload = shapes.responses_response(model, text, input_tokens, self.tokens)
        self.completed += 1
        await exchange.json(200, payload)

    def _token_texts(self, count: int) -> list[str]:
        return [f"{self.name}:tok{i} " for i in range(count)]

    def _plan(self, kind: str, model: str, body: dict[str, Any], prompt: int) -> _Generation:
        limit = body.get("max_completion_tokens") or body.get("max_tokens")
        count = self.tokens if not isinstance(limit, int) else min(self.tokens, limit)
        stream_options = body.get("stream_options") or {}
        return _Generation(
            kind=kind,
            model=model,
            texts=self._token_texts(count),
            finish_reason="length" if isinstance(limit, int) and limit <= self.tokens else "stop",
            prompt_tokens=prompt,
            stream=bool(body.get("stream")),
            include_usage=bool(stream_options.get("include_usage")),
        )

    async def _generate(self, exchange: Exchange, gen: _Generation) -> None:
        ticket = _Ticket(self)

        async def work(disconnected: asyncio.Event) -> None:
            if gen.stream:
                await self._stream(exchange, gen, disconnected, ticket)
            else:
                await self._respond(exchange, gen, disconnected, ticket)

        try:
            await watching_disconnect(exchange.receive, work)
        finally:
            ticket.settle(None)  # no-op unless the server cancelled the request

    async def _respond(
        self, ex: Exchange, gen: _Generation, gone: asyncio.Event, ticket: _Ticket
    ) -> None:
        delay = self.ttft_delay + max(len(gen.texts) - 1, 0) * self.token_delay
        if await pause(gone, delay):
            ticket.settle(Outcome.CANCELLED)
            return
        text = "".join(gen.texts)
        usage = shapes.usage(gen.prompt_tokens, len(gen.texts))
        rid = shapes.new_id("chatcmpl" if gen.kind == "chat" else "cmpl")
        build = shapes.chat_response if gen.kind == "chat" else shapes.completion_response
        data = orjson.dumps(build(rid, gen.model, text, gen.finish_reason, usage))
        await ex.start(200, b"application/json", len(data))
        if self.die_after_tokens is not None:
            # Half a body under a content-length, then return: uvicorn closes the
            # connection and the client sees the response cut.
            ticket.settle(Outcome.DIED)
            await ex.body(data[: len(data) // 2], more=True)
            return
        ticket.settle(Outcome.COMPLETED)
        await ex.body(data)

    async def _stream(
        self, ex: Exchange, gen: _Generation, gone: asyncio.Event, ticket: _Ticket
    ) -> None:
        if await pause(gone, self.ttft_delay):
            ticket.settle(Outcome.CANCELLED)
            return
        chat = gen.kind == "chat"
        rid = shapes.new_id("chatcmpl" if chat else "cmpl")
        await ex.start_events()
        if chat:
            await ex.event(shapes.chat_chunk(rid, gen.model, {"role": "assistant", "content": ""}))
        texts = gen.texts or [""]
        for i, text in enumerate(texts):
            if i > 0 and await pause(gone, self.token_delay):
                ticket.settle(Outcome.CANCELLED)
                return
            if self.die_after_tokens is not None and i >= self.die_after_tokens:
                # Returning with the stream unfinished makes uvicorn close the connection
                # without the terminating chunk: the client sees a broken stream.
                ticket.settle(Outcome.DIED)
                return
            finish = gen.finish_reason if i == len(texts) - 1 else None
            if chat:
                chunk = shapes.chat_chunk(rid, gen.model, {"content": text}, finish)
            else:
                chunk = shapes.completion_chunk(rid, gen.model, text, finish)
            await ex.event(chunk)
        if gen.include_usage:
            usage = shapes.usage(gen.prompt_tokens, len(gen.texts))
            kind = "chat.completion.chunk" if chat else "text_completion"
            await ex.event(shapes.usage_chunk(rid, gen.model, kind, usage))
        if await pause(gone, 0):
            ticket.settle(Outcome.CANCELLED)
            return
        ticket.settle(Outcome.COMPLETED)
        await ex.end_events()


class _Ticket:
    """One inference request in an engine's counters: running, then counted exactly once.

    Settled just *before* the response's last bytes go out, so a client that has read the
    whole response (or seen it cut) can assert on the counters without polling.
    """

    def __init__(self, engine: FakeEngine) -> None:
        self._engine: FakeEngine | None = engine
        engine.running += 1

    def settle(self, outcome: Outcome | None) -> None:
        engine, self._engine = self._engine, None
        if engine is None:
            return
        engine.running -= 1
        if outcome is Outcome.COMPLETED:
            engine.completed += 1
        elif outcome is Outcome.CANCELLED:
            engine.cancelled += 1
        elif outcome is Outcome.DIED:
            engine.died += 1


async def _lifespan(receive: Receive, send: Send) -> None:
    while True:
        message: Message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


def _parse_json(raw: bytes) -> Any:
    if not raw:
        return None
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
