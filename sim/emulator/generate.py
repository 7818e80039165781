"""The emulator's SGLang `POST /generate`: each prompt of a request through the engine model.

Text is tokenized (ids are taken as they are), every prompt of a batch is admitted as a
request of its own with its known output (`inference.output_ids`), and the answer takes
SGLang's shapes (`sglang_api`): one object (or a list) at the end, or an event a token. A
`lora_path` naming one of the replica's adapters runs with it. A client that disconnects
aborts the batch's requests. Prompts too long for the context are refused as SGLang does. A
data-parallel replica runs them on the rank the body names (`routed_dp_rank`) or it balances.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from typing import Any

from sim.emulator import asgi
from sim.emulator import sglang_api as api
from sim.emulator.data_parallel import RankBalancer, RankOutOfRange
from sim.emulator.inference import ClientGone, Connection, generation_ids, output_ids
from sim.emulator.replica import Generation, Replica
from sim.engine.tokenizer import Tokenizer
from sim.engine.types import TokenEvent

_Tokens = asyncio.Queue[TokenEvent | None]


class Generate:
    """Serves `/generate` on one replica (see the module docstring)."""

    def __init__(
        self, replica: Replica, tokenizer: Tokenizer, balancer: RankBalancer | None = None
    ) -> None:
        self.replica = replica
        self.balancer = balancer or RankBalancer([replica])
        self.tokenizer = tokenizer
        self._vocab = generation_ids(tokenizer)

    async def serve(self, receive: asgi.Receive, send: asgi.Send) -> None:
        data = api.parse_json(await asgi.read_body(receive))
        req = api.parse_generate(data)
        try:
            replica = self.balancer.choose(None, data)
        except RankOutOfRange as exc:
            raise api.SglangError(str(exc)) from None
        adapter = self._adapter(req.lora_path)
        prompts = [
            list(i.input_ids or ()) or self.tokenizer.encode(i.text or "") for i in req.items
        ]
        for item, prompt in zip(req.items, prompts, strict=True):
            self._check_length(len(prompt), item.max_new_tokens)
        conn = Connection(receive, replica)
        tokens: _Tokens = asyncio.Queue()
        gens: list[Generation] = []
        try:
            for item, prompt in zip(req.items, prompts, strict=True):
                out = output_ids(prompt, item.max_new_tokens, req.seed, self._vocab)
                engine_id = replica.new_request_id("generate")
                try:
                    gen = await replica.admit(engine_id, prompt, out, adapter, events=tokens)
                except ValueError as exc:  # an empty prompt
                    raise api.SglangError(str(exc)) from None
                gens.append(gen)
                conn.attach(gen)
            if req.stream:
                await self._stream(req, gens, tokens, send)
            else:
                await self._complete(req, gens, tokens, send)
        except ClientGone:
            pass  # nobody to answer
        finally:
            await conn.close()
            for gen in gens:
                replica.abort(gen.request_id)  # no-op once finished

    def _adapter(self, lora_path: str | None) -> str | None:
        if lora_path is None:
            return None
        if not self.replica.loras.serves(lora_path):
            raise api.SglangError(f"The LoRA adapter {lora_path!r} is not loaded.")
        return lora_path

    def _check_length(self, prompt_tokens: int, max_new_tokens: int) -> None:
        limit = self.replica.max_model_len
        if prompt_tokens >= limit:
            raise api.SglangError(
                f"The input ({prompt_tokens} tokens) is longer than the model's context "
                f"length ({limit} tokens)."
            )
        if prompt_tokens + max_new_tokens >= limit:
            raise api.SglangError(
                f"Requested token count exceeds the model's maximum context length of {limit} "
                f"tokens. You requested a total of {prompt_tokens + max_new_tokens} tokens: "
                f"{prompt_tokens} tokens from the input messages and {max_new_tokens} tokens "
                "for the completion. Please reduce the number of tokens in the input messages "
                "or the completion to fit within the limit."
            )

    async def _complete(
        self, req: api.GenerateRequest, gens: Sequence[Generation], tokens: _Tokens, send: asgi.Send
    ) -> None:
        produced: list[list[int]] = [[] for _ in gens]
        index = {g.request_id: i for i, g in enumerate(gens)}
        async for ev in _drain(tokens, len(gens)):
            produced[index[ev.request_id]].append(ev.token_id)
        if any(len(ids) < len(g.output) for ids, g in zip(produced, gens, strict=True)):
            raise ClientGone  # aborted
        now = asyncio.get_running_loop().time()
        outputs = [
            api.output(
                self.tokenizer.decode(ids),
                ids,
                self._meta(item.rid, gen, len(ids), now, finished=True),
            )
            for item, gen, ids in zip(req.items, gens, produced, strict=True)
        ]
        await asgi.respond_json(send, 200, outputs[0] if req.single else outputs)

    async def _stream(
        self, req: api.GenerateRequest, gens: Sequence[Generation], tokens: _Tokens, send: asgi.Send
    ) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": asgi.SSE})
        produced: list[list[int]] = [[] for _ in gens]
        texts = [""] * len(gens)
        index = {g.request_id: i for i, g in enumerate(gens)}
        loop = asyncio.get_running_loop()
        async for ev in _drain(tokens, len(gens)):
            i = index[ev.request_id]
            produced[i].append(ev.token_id)
            texts[i] += self.tokenizer.decode([ev.token_id])
            meta = self._meta(req.items[i].rid, gens[i], len(produced[i]), loop.time(), ev.finished)
            obj = api.output(texts[i], produced[i], meta)
            if not req.single:
                obj["index"] = i
            await asgi.chunk(send, api.event(obj))
        if any(len(ids) < len(g.output) for ids, g in zip(produced, gens, strict=True)):
            raise ClientGone  # aborted
        await send({"type": "http.response.body", "body": api.DONE, "more_body": False})

    @staticmethod
    def _meta(
        rid: str, gen: Generation, produced: int, now: float, finished: bool
    ) -> dict[str, Any]:
        return api.meta_info(
            rid,
            gen.prompt_tokens,
            produced,
            gen.cached_tokens,
            finished=finished,
            e2e_latency=now - gen.arrival,
        )


async def _drain(tokens: _Tokens, requests: int) -> AsyncIterator[TokenEvent]:
    """The token events of `requests` generations sharing `tokens`, until each has ended
    (finished, or aborted: its `None`)."""
    ended = 0
    while ended < requests:
        ev = await tokens.get()
        if ev is None:
            ended += 1
            continue
        yield ev
