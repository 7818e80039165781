"""The emulator's `/v1/completions` and `/v1/chat/completions`: a request through the engine model.

A request is tokenized, given its known output (deterministic per prompt and seed, as many
tokens as `max_tokens` asks), queued in the replica's engine model and answered as its tokens
arrive (SSE) or at the end (one JSON body). A client that disconnects aborts the request in
the engine model, which frees its KV blocks, as vLLM does; a request that is one leg of a
P/D pair first waits for the other side, and a prefill leg hands its blocks over before it
answers (`sim.emulator.disagg.coordinator`); one naming a prefiller in llm-d's header first
runs that prefill leg (`disagg.sidecar`). `X-Request-Id` becomes part of the request id. A
data-parallel replica runs it on the rank its `RankBalancer` chooses.
"""

from __future__ import annotations

import asyncio
import random
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any, TypeVar

from sim.emulator import asgi
from sim.emulator import openai_api as api
from sim.emulator.data_parallel import RANK_HEADER, RankBalancer, RankOutOfRange
from sim.emulator.disagg.coordinator import Disaggregation
from sim.emulator.disagg.legs import LegKind
from sim.emulator.disagg.sidecar import PREFILLER_HEADER
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
        balancer: RankBalancer | None = None,
    ) -> None:
        self.replica = replica
        self.balancer = balancer or RankBalancer([replica])  # the rank each request runs on
        self.tokenizer = tokenizer
        self.pd = pd
        self._check_model = check_model
        self._vocab = generation_ids(tokenizer)

    async def serve(
        self, kind: str, scope: asgi.Scope, receive: asgi.Receive, send: asgi.Send
    ) -> None:
        data = api.parse_json(await asgi.read_body(receive))
        req = api.parse_inference(kind, data)
        adapter = self._check_model(req.model)
        replica = self._rank(scope, data)
        prompt = list(req.prompt_ids or self.tokenizer.encode(req.prompt_text or ""))
        pd = self.pd.request(data)
        param = "messages" if req.kind == "chat" else "prompt"
        n_out = self.output_len(len(prompt), req.max_tokens, param, api.DEFAULT_CHAT_TOKENS)
        if pd is not None and pd.leg.kind is LegKind.SGLANG_PREFILL:
            n_out = 1  # SGLang's prefill server stops at the first token
        output = output_ids(prompt, n_out, req.seed, self._vocab)
        prefix = "chatcmpl" if kind == "chat" else "cmpl"
        x_request_id = asgi.header(scope, b"x-request-id")
        prefiller = self.pd.sidecar_prefiller(asgi.header(scope, PREFILLER_HEADER), data)
        if prefiller is not None and not x_request_id:
            x_request_id = str(uuid.uuid4())  # one id for both legs, as the sidecar sends
        if x_request_id:
            prefix = f"{prefix}-{x_request_id}"
        request_id = replica.new_request_id(prefix)
        conn = Connection(receive, replica)
        answered = False
        try:
            if prefiller is not None:  # llm-d's sidecar runs P first
                leg = self.pd.sidecar_prefill(prefiller, scope["path"], data, x_request_id or "")
                pd = self.pd.request(await conn.unless_gone(leg))
            external = 0
            if pd is not None:
                external = await conn.unless_gone(self.pd.before_admit(pd, prompt, adapter))
            hold = pd is not None and pd.prefill
            try:
                gen = await replica.admit(
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
            replica.abort(request_id)  # no-op when it finished
            if pd is not None and not answered:
                self.pd.abandon(pd, request_id)

    def _rank(self, scope: asgi.Scope, data: dict[str, Any]) -> Replica:
        try:
            return self.balancer.choose(asgi.header(scope, RANK_HEADER), data)
        except RankOutOfRange as exc:
            raise api.ApiError(400, str(exc)) from None

    def output_len(self, prompt_len: int, max_tokens: int | None, param: str, default: int) -> int:
        """How many tokens to generate (`default` when `max_tokens` is None, within the
        context); a vLLM-worded 400 naming `param` for a prompt too long."""
        limit = self.replica.max_model_len
        if prompt_len >= limit:
            raise api.ApiError(
                400,
                f"This model's maximum context length is {limit} tokens. However, your "
                f"request has {prompt_len} input tokens. Please reduce the length of the "
                "input messages.",
                param=param,
            )
        if max_tokens is None:
            return min(default, limit - prompt_len)
        if max_tokens > limit - prompt_len:
            raise api.ApiError(
                400,
                f"'max_tokens' or 'max_completion_tokens' is too large: {max_tokens}. "
                f"This model's maximum context length is {limit} tokens and your request has "
                f"{prompt_len} input tokens ({max_tokens} > {limit} - {prompt_len}).",
                param="max_tokens",
            )
        return max_tokens

    def output_ids(self, prompt: list[int], n: int, seed: int | None) -> list[int]:
        """The answer's token ids: deterministic per prompt (and seed)."""
        return output_ids(prompt, n, seed, self._vocab)

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


class Connection:
    """Watches the client's connection: a disconnect aborts the requests in the engine model
    (ending their token streams), or cuts short a wait before they entered (`unless_gone`)."""

    def __init__(self, receive: asgi.Receive, replica: Replica) -> None:
        self._receive = receive
        self._replica = replica
        self._gens: list[Generation] = []
        self.gone = asyncio.Event()
        self._watcher = asyncio.ensure_future(self._watch())

    def attach(self, gen: Generation) -> None:
        self._gens.append(gen)
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
        for gen in self._gens:
            self._replica.abort(gen.request_id)
            gen.events.put_nowait(None)


def output_ids(prompt: Sequence[int], n: int, seed: int | None, vocab: Sequence[int]) -> list[int]:
    """A prompt's `n` output tokens: deterministic per prompt (and seed), so a repeated request
    repeats its answer."""
    rng = random.Random(hash((tuple(prompt[-64:]), len(prompt), -1 if seed is None else seed)))
    return [rng.choice(vocab) for _ in range(n)]


def generation_ids(tokenizer: Tokenizer) -> list[int]:
    """Token ids to generate: the built-in tokenizer's round-trip-safe words, else a fixed
    band of a real tokenizer's vocabulary."""
    vocabulary = getattr(tokenizer, "generation_vocabulary", None)
    if vocabulary is not None:
        return [tid for tid, _ in vocabulary()]
    return list(range(1000, min(tokenizer.vocab_size, 1256)))
