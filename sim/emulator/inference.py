"""The emulator's `/v1/completions` and `/v1/chat/completions`: a request through the engine model.

A request is tokenized, given its known output (deterministic per prompt and seed, as many
tokens as `max_tokens` asks), queued in the replica's engine model and answered as its tokens
arrive (SSE) or at the end (one JSON body). A client that disconnects aborts the request in
the engine model, which frees its KV blocks, as vLLM does; a request that is one leg of a
P/D pair first waits for the other side, and a prefill leg hands its blocks over before it
answers (`sim.emulator.disagg.coordinator`). `X-Request-Id` becomes part of the request id.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

from sim.emulator import asgi
from sim.emulator import openai_api as api
from sim.emulator.disagg.coordinator import Disaggregation
from sim.emulator.disagg.legs import LegKind
from sim.emulator.replica import Generation, Replica
from sim.engine.tokenizer import Tokenizer

T = TypeVar("T")
Finish = Callable[[], Awaitable[dict[str, Any] | None]]


class ClientGone(Exception):
    """The client disconnected before its request entered the engine model."""


class Completions:
    """Serves the inference routes of one replica (see the module docstring)."""

    def __init__(
        self,
        replica: Replica,
        tokenizer: Tokenizer,
        pd: Disaggregation,
        check_model: Callable[[str | None], str | None],
    ) -> None:
        self.replica = replica
        self.tokenizer = tokenizer
        self.pd = pd
        self._check_model = check_model
        self._vocab = _generation_ids(tokenizer)

    async def serve(
        self, kind: str, scope: asgi.Scope, receive: asgi.Receive, send: asgi.Send
    ) -> None:
        data = api.parse_json(await asgi.read_body(receive))
        req = api.parse_inference(kind, data)
        adapter = self._check_model(req.model)
        prompt = list(req.prompt_ids or self.tokenizer.encode(req.prompt_text or ""))
        pd = self.pd.request(data)
        n_out = self._output_len(req, len(prompt))
        if pd is not None and pd.leg.kind is LegKind.SGLANG_PREFILL:
            n_out = 1  # SGLang's prefill server stops at the first token
        output = self._output_ids(prompt, n_out, req.seed)
        prefix = "chatcmpl" if kind == "chat" else "cmpl"
        x_request_id = asgi.header(scope, b"x-request-id")
        if x_request_id:
            prefix = f"{prefix}-{x_request_id}"
        request_id = self.replica.new_request_id(prefix)
        conn = _Connection(receive, self.replica)
        answered = False
        try:
            external = 0
            if pd is not None:
                external = await conn.unless_gone(self.pd.before_admit(pd, prompt, adapter))
            hold = pd is not None and pd.prefill
            try:
                gen = await self.replica.admit(
                    request_id, prompt, output, adapter, external_tokens=external, hold=hold
                )
            except ValueError as exc:
                raise api.ApiError(400, str(exc)) from None
            conn.attach(gen)
            finish: Finish | None = None
            if pd is not None:
                pd_request, address = pd, scope.get("server")
                finish = lambda: self.pd.after_generation(pd_request, gen, address)  # noqa: E731
            if req.stream:
                answered = await self._stream(gen, req, send, finish)
            else:
                answered = await self._complete(gen, req, send, finish)
        except ClientGone:
            pass  # nobody to answer
        finally:
            await conn.close()
            self.replica.abort(request_id)  # no-op when it finished
            if pd is not None and not answered:
                self.pd.abandon(pd, request_id)

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

    async def _complete(
        self, gen: Generation, req: api.ParsedRequest, send: asgi.Send, finish: Finish | None
    ) -> bool:
        ids = []
        while (ev := await gen.events.get()) is not None:
            ids.append(ev.token_id)
        if len(ids) < len(gen.output):
            return False  # aborted: the client is gone
        extra = await finish() if finish is not None else None
        use = api.usage(gen.prompt_tokens, len(ids), gen.cached_tokens)
        text = self.tokenizer.decode(ids)
        body = api.completion_body(gen.request_id, req.kind, req.model, text, use, extra=extra)
        await asgi.respond(send, 200, body, asgi.JSON)
        return True

    async def _stream(
        self, gen: Generation, req: api.ParsedRequest, send: asgi.Send, finish: Finish | None
    ) -> bool:
        await send({"type": "http.response.start", "status": 200, "headers": asgi.SSE})
        produced = 0
        while (ev := await gen.events.get()) is not None:
            if produced == 0 and req.kind == "chat":
                # vLLM sends the role chunk with the first output, after the prefill.
                await asgi.chunk(send, api.role_chunk(gen.request_id, req.model))
            produced += 1
            text = self.tokenizer.decode([ev.token_id])
            finish_reason = "length" if ev.finished else None
            chunk = api.stream_chunk(gen.request_id, req.kind, req.model, text, finish_reason)
            await asgi.chunk(send, chunk)
        if produced < len(gen.output):
            return False  # aborted: the client is gone
        if finish is not None:
            await finish()
        if req.include_usage:
            use = api.usage(gen.prompt_tokens, produced, gen.cached_tokens)
            await asgi.chunk(send, api.usage_chunk(gen.request_id, req.kind, req.model, use))
        await send({"type": "http.response.body", "body": api.DONE, "more_body": False})
        return True


class _Connection:
    """Watches the client's connection: a disconnect aborts the request in the engine model
    (ending its token stream), or cuts short a wait before it entered (`unless_gone`)."""

    def __init__(self, receive: asgi.Receive, replica: Replica) -> None:
        self._receive = receive
        self._replica = replica
        self._gen: Generation | None = None
        self.gone = asyncio.Event()
        self._watcher = asyncio.ensure_future(self._watch())

    def attach(self, gen: Generation) -> None:
        self._gen = gen
        if self.gone.is_set():
            raise ClientGone

    async def unless_gone(self, work: Coroutine[Any, Any, T]) -> T:
        """`await work`, unless the client leaves first (ClientGone; `work` is cancelled)."""
        task = asyncio.ensure_future(work)
        gone = asyncio.ensure_future(self.gone.wait())
        try:
            await asyncio.wait((task, gone), return_when=asyncio.FIRST_COMPLETED)
        finally:
            gone.cancel()
            if not task.done():
                task.cancel()
                await asyncio.wait((task,))
        if task.cancelled():
            raise ClientGone
        return task.result()

    async def close(self) -> None:
        self._watcher.cancel()
        await asyncio.wait((self._watcher,))

    async def _watch(self) -> None:
        while (await self._receive())["type"] != "http.disconnect":
            pass
        self.gone.set()
        if self._gen is not None:
            self._replica.abort(self._gen.request_id)
            self._gen.events.put_nowait(None)


def _generation_ids(tokenizer: Tokenizer) -> list[int]:
    """Token ids to generate: the built-in tokenizer's round-trip-safe words, else a fixed
    band of a real tokenizer's vocabulary."""
    vocabulary = getattr(tokenizer, "generation_vocabulary", None)
    if vocabulary is not None:
        return [tid for tid, _ in vocabulary()]
    return list(range(1000, min(tokenizer.vocab_size, 1256)))
