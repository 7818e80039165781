"""The emulator's Responses API: `POST /v1/responses` through the engine model, and the
replica's own store of responses (`GET`/`DELETE /v1/responses/{id}`, `POST .../cancel`).

As vLLM with `VLLM_ENABLE_RESPONSES_API_STORE=1`: a response with `store` (the default) is
kept in this replica's memory (the last `MAX_STORED`), with its conversation's token ids; a
request with `previous_response_id` continues it (its prompt is the previous prompt, the
previous output and the new turn, so the prefix cache serves the earlier turns) and names an
id this replica does not hold: 404. `background` answers at once (status `queued`) and
generates in a task owned by the store (cancelled by `/cancel` or at shutdown). DELETE is
OpenAI's (vLLM 0.32 has none): `{"id", "object": "response", "deleted": true}`.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from sim.emulator import asgi
from sim.emulator import openai_api as api
from sim.emulator import responses_api as rapi
from sim.emulator.inference import ClientGone, Completions, Connection
from sim.emulator.replica import Generation, Replica
from sim.engine.tokenizer import Tokenizer
from sim.engine.types import TokenEvent

MAX_STORED = 10_000
PREFIX = "/v1/responses/"
_TURN_END = "<|im_end|>\n"


@dataclass(slots=True)
class Stored:
    """A response this replica holds: its object and its conversation's token ids."""

    obj: dict[str, Any]
    conversation: list[int] = field(default_factory=list)
    task: asyncio.Task[None] | None = None  # a background generation still running


class Responses:
    """Serves the Responses API routes of one replica (see the module docstring)."""

    def __init__(
        self,
        replica: Replica,
        tokenizer: Tokenizer,
        completions: Completions,
        check_model: Callable[[str | None], str | None],
    ) -> None:
        self.replica = replica
        self.tokenizer = tokenizer
        self._completions = completions
        self._check_model = check_model
        self.store: OrderedDict[str, Stored] = OrderedDict()

    async def serve(self, scope: asgi.Scope, receive: asgi.Receive, send: asgi.Send) -> None:
        path, method = scope["path"], scope["method"]
        if path == "/v1/responses" and method == "POST":
            await self.create(receive, send)
            return
        response_id, _, action = path[len(PREFIX) :].partition("/")
        allowed = ("GET", "DELETE") if action == "" else ("POST",) if action == "cancel" else ()
        if not path.startswith(PREFIX) or not response_id or method not in allowed:
            await asgi.respond(send, 404, asgi.NOT_FOUND, asgi.JSON)
            return
        stored = self.store.get(response_id)
        if stored is None:
            raise rapi.not_found(response_id)
        if method == "GET":
            await asgi.respond_json(send, 200, stored.obj)
        elif method == "DELETE":
            await self._cancel_task(stored)
            del self.store[response_id]
            deleted = {"id": response_id, "object": "response", "deleted": True}
            await asgi.respond_json(send, 200, deleted)
        else:
            await self._cancel(stored, send)

    async def close(self) -> None:
        """Shutdown: stop the background generations."""
        for stored in list(self.store.values()):
            await self._cancel_task(stored)

    async def create(self, receive: asgi.Receive, send: asgi.Send) -> None:
        data = api.parse_json(await asgi.read_body(receive))
        req = rapi.parse_responses(data)
        adapter = self._check_model(req.model)
        history: list[int] = []
        if req.previous_response_id is not None:
            previous = self.store.get(req.previous_response_id)
            if previous is None:
                raise rapi.not_found(req.previous_response_id)
            history = previous.conversation
        prompt = history + self.tokenizer.encode(req.text)
        n_out = self._completions.output_len(
            len(prompt), req.max_output_tokens, "input", rapi.DEFAULT_OUTPUT_TOKENS
        )
        output = self._completions.output_ids(prompt, n_out, req.seed)
        response_id = rapi.new_id("resp")
        turn = _Turn(response_id, req, prompt, n_out)
        try:
            gen = await self.replica.admit(response_id, prompt, output, adapter)
        except ValueError as exc:
            raise api.ApiError(400, str(exc)) from None
        if req.background:
            self._keep(turn, "queued")
            stored = self.store[response_id]
            stored.task = asyncio.create_task(self._background(turn, gen, stored))
            await asgi.respond_json(send, 200, stored.obj)
            return
        conn = Connection(receive, self.replica)
        try:
            conn.attach(gen)
            if req.stream:
                await self._stream(turn, gen, send)
            else:
                await self._complete(turn, gen, send)
        except ClientGone:
            pass
        finally:
            await conn.close()
            self.replica.abort(response_id)

    async def _complete(self, turn: _Turn, gen: Generation, send: asgi.Send) -> None:
        ids = [ev.token_id async for ev in _tokens(gen)]
        if len(ids) < len(gen.output):
            return  # aborted: the client is gone
        obj = self._finish(turn, gen, ids)
        await asgi.respond_json(send, 200, obj)

    async def _stream(self, turn: _Turn, gen: Generation, send: asgi.Send) -> None:
        w = rapi.EventWriter()
        await send({"type": "http.response.start", "status": 200, "headers": asgi.SSE})
        in_progress = turn.obj("in_progress")
        await asgi.chunk(send, w.event("response.created", response=in_progress))
        await asgi.chunk(send, w.event("response.in_progress", response=in_progress))
        where = {"item_id": turn.message_id, "output_index": 0}
        item = rapi.message_item(turn.message_id, "", "in_progress")
        await asgi.chunk(send, w.event("response.output_item.added", output_index=0, item=item))
        part = rapi.output_text("")
        added = w.event("response.content_part.added", **where, content_index=0, part=part)
        await asgi.chunk(send, added)
        ids = []
        async for ev in _tokens(gen):
            ids.append(ev.token_id)
            delta = self.tokenizer.decode([ev.token_id])
            text_delta = w.event(
                "response.output_text.delta", **where, content_index=0, delta=delta, logprobs=[]
            )
            await asgi.chunk(send, text_delta)
        if len(ids) < len(gen.output):
            return  # aborted: the client is gone
        obj = self._finish(turn, gen, ids)
        text = obj["output"][0]["content"][0]["text"]
        part = rapi.output_text(text)
        done = [
            w.event("response.output_text.done", **where, content_index=0, text=text, logprobs=[]),
            w.event("response.content_part.done", **where, content_index=0, part=part),
            w.event("response.output_item.done", output_index=0, item=obj["output"][0]),
            w.event("response.completed", response=obj),
        ]
        await send({"type": "http.response.body", "body": b"".join(done), "more_body": False})

    async def _background(self, turn: _Turn, gen: Generation, stored: Stored) -> None:
        try:
            stored.obj = turn.obj("in_progress")
            ids = [ev.token_id async for ev in _tokens(gen)]
            if len(ids) == len(gen.output):
                self._finish(turn, gen, ids)
        finally:
            self.replica.abort(turn.response_id)
            stored.task = None

    def _finish(self, turn: _Turn, gen: Generation, ids: list[int]) -> dict[str, Any]:
        """The completed response, kept when stored."""
        text = self.tokenizer.decode(ids)
        use = rapi.usage(gen.prompt_tokens, len(ids), gen.cached_tokens)
        obj = turn.obj("completed", text=text, usage=use)
        if turn.req.store:
            # The next turn's prompt starts with this one's prompt and answer.
            conversation = turn.prompt + ids + self.tokenizer.encode(_TURN_END)
            self._keep(turn, "completed", obj, conversation)
        return obj

    def _keep(
        self,
        turn: _Turn,
        status: str,
        obj: dict[str, Any] | None = None,
        conversation: list[int] | None = None,
    ) -> None:
        stored = self.store.get(turn.response_id)
        if stored is None:
            stored = self.store[turn.response_id] = Stored(turn.obj(status))
        stored.obj = obj or turn.obj(status)
        stored.conversation = conversation or stored.conversation
        while len(self.store) > MAX_STORED:
            self.store.popitem(last=False)

    async def _cancel(self, stored: Stored, send: asgi.Send) -> None:
        if stored.obj["status"] not in ("queued", "in_progress"):
            raise api.ApiError(
                400, "Cannot cancel a synchronous response.", "invalid_request_error", "response_id"
            )
        await self._cancel_task(stored)
        stored.obj = {**stored.obj, "status": "cancelled"}
        await asgi.respond_json(send, 200, stored.obj)

    async def _cancel_task(self, stored: Stored) -> None:
        task = stored.task
        if task is not None and not task.done():
            task.cancel()
            await asyncio.wait((task,))
        self.replica.abort(stored.obj["id"])  # also when the task never started


@dataclass(frozen=True, slots=True)
class _Turn:
    """One `POST /v1/responses`: what its response objects are made of."""

    response_id: str
    req: rapi.ResponsesRequest
    prompt: list[int]
    max_output_tokens: int
    message_id: str = field(default_factory=lambda: rapi.new_id("msg"))

    def obj(self, status: str, **kw: Any) -> dict[str, Any]:
        return rapi.response_object(
            self.response_id,
            self.req,
            status,
            message_id=self.message_id,
            max_output_tokens=self.max_output_tokens,
            **kw,
        )


async def _tokens(gen: Generation) -> AsyncIterator[TokenEvent]:
    """The generation's tokens until its end (or its abort)."""
    while (ev := await gen.events.get()) is not None:
        yield ev
