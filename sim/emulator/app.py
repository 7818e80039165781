"""The ASGI app of one emulated replica: vLLM's HTTP surface over a `Replica`.

Routes: `POST /v1/chat/completions`, `/v1/completions` (streaming or not), `/tokenize`;
`GET /v1/models`, `/health`, `/load`, `/metrics`; and what peer routers probe (see
`probes`): `GET /server_info`, `/get_server_info`, `/model_info`, `/get_model_info`,
`/get_load`, and `POST /v1/completions/render`, `/v1/chat/completions/render` (403). Also
`POST /reset_prefix_cache` (vLLM's, served in its dev mode; 409 while requests hold blocks)
and `GET /kvgate/cache`, the cached block hashes as KV events name them (for tests). A
client that disconnects aborts its request in the engine model, which frees its KV blocks,
as vLLM does. The replica's LoRA adapters are models of their own, listed with the base
model as their `parent` and served by the same engine model (see `sim.emulator.lora`).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import orjson

from sim.emulator import openai_api as api
from sim.emulator import probes
from sim.emulator.replica import Generation, Replica
from sim.engine.tokenizer import Tokenizer

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

_JSON = [(b"content-type", b"application/json")]
_SSE = [(b"content-type", b"text/event-stream; charset=utf-8"), (b"cache-control", b"no-cache")]
_PROM = [(b"content-type", b"text/plain; version=0.0.4; charset=utf-8")]


class EmulatorApp:
    """One replica's ASGI callable; its lifespan runs the replica's engine loop."""

    def __init__(self, replica: Replica, tokenizer: Tokenizer) -> None:
        self.replica = replica
        self.tokenizer = tokenizer
        self._vocab = _generation_ids(tokenizer)
        self._created = int(time.time())

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        path, method = scope["path"], scope["method"]
        try:
            if method == "POST" and path in ("/v1/chat/completions", "/v1/completions"):
                await self._inference(path, receive, send)
            elif method == "POST" and path == "/tokenize":
                await self._tokenize(receive, send)
            elif method == "GET" and path == "/health":
                await _respond(send, 200, b"", [])
            elif method == "GET" and path == "/v1/models":
                await _respond(send, 200, orjson.dumps(self._models()), _JSON)
            elif method == "GET" and path == "/load":
                body = orjson.dumps({"server_load": self.replica.in_flight})
                await _respond(send, 200, body, _JSON)
            elif method == "GET" and path == "/metrics":
                await _respond(send, 200, self.replica.metrics.render(), _PROM)
            elif method == "GET" and path == "/kvgate/cache":
                await _respond(send, 200, orjson.dumps(self._cache_view()), _JSON)
            elif method == "POST" and path == "/reset_prefix_cache":
                await self._reset_prefix_cache(send)
            else:
                await self._probe(method, path, send)
        except api.ApiError as exc:
            await _respond(send, exc.status, exc.body(), _JSON)

    async def _probe(self, method: str, path: str, send: Send) -> None:
        """What peer routers ask a worker besides vLLM's own routes."""
        body: dict[str, Any]
        if method == "GET" and path in probes.SERVER_INFO:
            body = probes.server_info(self.replica)
        elif method == "GET" and path in probes.MODEL_INFO:
            body = probes.model_info(self.replica)
        elif method == "GET" and path == "/get_load":
            body = probes.load(self.replica)
        elif method == "POST" and path in probes.RENDER:
            raise probes.render_refused()
        else:
            await _respond(send, 404, b'{"detail":"Not Found"}', _JSON)
            return
        await _respond(send, 200, orjson.dumps(body), _JSON)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        await receive()
        async with asyncio.TaskGroup() as tg:
            loop_task = tg.create_task(self.replica.run(), name="engine-loop")
            await send({"type": "lifespan.startup.complete"})
            await receive()
            loop_task.cancel()
        await send({"type": "lifespan.shutdown.complete"})

    def _cache_view(self) -> dict[str, Any]:
        config = self.replica.profile.config
        return {
            "block_size": config.block_size,
            "num_blocks": config.num_blocks,
            "block_hashes": self.replica.cached_block_hashes(),
        }

    async def _reset_prefix_cache(self, send: Send) -> None:
        if not await self.replica.reset_prefix_cache():
            raise api.ApiError(
                409, "KV blocks are still in use: the cache was not reset", "ConflictError"
            )
        await _respond(send, 200, b"", [])

    def _models(self) -> dict[str, Any]:
        r = self.replica
        base = self._card(r.model_name, r.model_name, None, r.max_model_len)
        # As vLLM lists `--lora-modules NAME=PATH`: root is the adapter's path (here its name).
        adapters = [self._card(a, a, r.model_name, None) for a in r.adapters]
        return {"object": "list", "data": [base, *adapters]}

    def _card(self, id_: str, root: str, parent: str | None, max_len: int | None) -> dict[str, Any]:
        return {
            "id": id_,
            "object": "model",
            "created": self._created,
            "owned_by": "vllm",
            "root": root,
            "parent": parent,
            "max_model_len": max_len,
        }

    def _check_model(self, model: str | None) -> str | None:
        """The LoRA adapter `model` names, None for the base model; 404 for any other."""
        if model is None or model == self.replica.model_name:
            return None
        if self.replica.loras.serves(model):
            return model
        raise api.ApiError(404, f"The model `{model}` does not exist.", "NotFoundError", "model")

    async def _tokenize(self, receive: Receive, send: Send) -> None:
        data = api.parse_json(await _read_body(receive))
        self._check_model(data.get("model"))
        if isinstance(data.get("messages"), list):
            ids = self.tokenizer.encode(api.render_chat(data["messages"]))
        elif isinstance(data.get("prompt"), str):
            ids = self.tokenizer.encode(data["prompt"])
        else:
            raise api.ApiError(400, "field 'prompt' or 'messages' is required", param="prompt")
        body = {
            "count": len(ids),
            "max_model_len": self.replica.max_model_len,
            "tokens": ids,
            "token_strs": None,
        }
        await _respond(send, 200, orjson.dumps(body), _JSON)

    async def _inference(self, path: str, receive: Receive, send: Send) -> None:
        kind = "chat" if path == "/v1/chat/completions" else "completion"
        req = api.parse_inference(kind, api.parse_json(await _read_body(receive)))
        adapter = self._check_model(req.model)
        prompt = list(req.prompt_ids or self.tokenizer.encode(req.prompt_text or ""))
        n_out = self._output_len(req, len(prompt))
        output = self._output_ids(prompt, n_out, req.seed)
        request_id = self.replica.new_request_id("chatcmpl" if kind == "chat" else "cmpl")
        try:
            gen = await self.replica.admit(request_id, prompt, output, adapter)
        except ValueError as exc:
            raise api.ApiError(400, str(exc)) from None
        watcher = asyncio.ensure_future(_abort_on_disconnect(receive, self.replica, gen))
        try:
            if req.stream:
                await self._stream(gen, req, send)
            else:
                await self._complete(gen, req, send)
        finally:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher
            self.replica.abort(request_id)  # no-op when it finished

    def _output_len(self, req: api.ParsedRequest, prompt_len: int) -> int:
        limit = self.replica.max_model_len
        if prompt_len >= limit:
            raise api.ApiError(
                400,
                f"This model's maximum context length is {limit} tokens. However, your "
                f"request has {prompt_len} input tokens. Please reduce the length of the "
                "input messages.",
                param="messages" if req.kind == "chat" else "prompt",
            )
        if req.max_tokens is None:
            return min(api.DEFAULT_CHAT_TOKENS, limit - prompt_len)
        if req.max_tokens > limit - prompt_len:
            raise api.ApiError(
                400,
                f"'max_tokens' or 'max_completion_tokens' is too large: {req.max_tokens}. "
                f"This model's maximum context length is {limit} tokens and your request has "
                f"{prompt_len} input tokens ({req.max_tokens} > {limit} - {prompt_len}).",
                param="max_tokens",
            )
        return req.max_tokens

    def _output_ids(self, prompt: list[int], n: int, seed: int | None) -> list[int]:
        # Deterministic per prompt (and seed), so a repeated request repeats its answer.
        rng = random.Random(hash((tuple(prompt[-64:]), len(prompt), -1 if seed is None else seed)))
        return [rng.choice(self._vocab) for _ in range(n)]

    async def _complete(self, gen: Generation, req: api.ParsedRequest, send: Send) -> None:
        ids = []
        while (ev := await gen.events.get()) is not None:
            ids.append(ev.token_id)
        use = api.usage(gen.prompt_tokens, len(ids), gen.cached_tokens)
        body = api.completion_body(
            gen.request_id, req.kind, req.model, self.tokenizer.decode(ids), use
        )
        await _respond(send, 200, body, _JSON)

    async def _stream(self, gen: Generation, req: api.ParsedRequest, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": _SSE})
        produced = 0
        while (ev := await gen.events.get()) is not None:
            if produced == 0 and req.kind == "chat":
                # vLLM sends the role chunk with the first output, after the prefill.
                await _chunk(send, api.role_chunk(gen.request_id, req.model))
            produced += 1
            text = self.tokenizer.decode([ev.token_id])
            finish = "length" if ev.finished else None
            await _chunk(send, api.stream_chunk(gen.request_id, req.kind, req.model, text, finish))
        if produced < len(gen.output):
            return  # aborted: the client is gone
        if req.include_usage:
            use = api.usage(gen.prompt_tokens, produced, gen.cached_tokens)
            await _chunk(send, api.usage_chunk(gen.request_id, req.kind, req.model, use))
        await send({"type": "http.response.body", "body": api.DONE, "more_body": False})


def _generation_ids(tokenizer: Tokenizer) -> list[int]:
    """Token ids to generate: the built-in tokenizer's round-trip-safe words, else a fixed
    band of a real tokenizer's vocabulary."""
    vocabulary = getattr(tokenizer, "generation_vocabulary", None)
    if vocabulary is not None:
        return [tid for tid, _ in vocabulary()]
    return list(range(1000, min(tokenizer.vocab_size, 1256)))


async def _abort_on_disconnect(receive: Receive, replica: Replica, gen: Generation) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
    replica.abort(gen.request_id)
    gen.events.put_nowait(None)


async def _read_body(receive: Receive) -> bytes:
    chunks = []
    while True:
        msg = await receive()
        chunks.append(msg.get("body", b""))
        if not msg.get("more_body", False):
            return b"".join(chunks)


async def _chunk(send: Send, data: bytes) -> None:
    await send({"type": "http.response.body", "body": data, "more_body": True})


async def _respond(
    send: Send, status: int, body: bytes, headers: list[tuple[bytes, bytes]]
) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [*headers, (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})
