"""The ASGI app of one emulated replica: vLLM's (or SGLang's) HTTP surface over a `Replica`.

Routes: `POST /v1/chat/completions`, `/v1/completions` (streaming or not; `inference`),
`/v1/responses` and its stored responses (GET/DELETE `/v1/responses/{id}`, `.../cancel`;
`responses`), `/tokenize`, `/detokenize`, vLLM's `/pooling`, `/classify`, or for an SGLang
replica (its `/metrics` then SGLang's) `/generate`, `/v1/rerank`, `/v1/score` (`generate`,
`utility_api`); `GET /v1/models`, `/health`, `/load`, `/metrics`; what peer routers probe
(`probes`): `/server_info`, `/get_server_info`, `/model_info`, `/get_model_info`, `/get_load`,
`POST /v1/completions/render`, `/v1/chat/completions/render` (403). Also `POST
/reset_prefix_cache` (409 while requests hold blocks), `GET /kvgate/cache` (the cached block
hashes, for tests; per rank on a data-parallel replica, and `/kvgate/dp`), and for P/D
(`sim.emulator.disagg`) `POST /kvgate/pd/pull/{id}`, `GET /kvgate/pd/handoffs`. LoRA
adapters are models of their own, listed with the base model as their `parent`, served by the
same engine model (`sim.emulator.lora`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any

import orjson

from sim.emulator import openai_api as api
from sim.emulator import probes, sglang_api
from sim.emulator.asgi import (
    JSON,
    NOT_FOUND,
    PROMETHEUS,
    Receive,
    Scope,
    Send,
    read_body,
    respond,
    respond_json,
)
from sim.emulator.data_parallel import RankBalancer
from sim.emulator.disagg.coordinator import Disaggregation
from sim.emulator.disagg.settings import PDSettings
from sim.emulator.generate import Generate
from sim.emulator.inference import Completions
from sim.emulator.metrics import render_families
from sim.emulator.replica import Replica
from sim.emulator.responses import Responses
from sim.emulator.utility_api import Utilities
from sim.engine.tokenizer import Tokenizer

_PULL = "/kvgate/pd/pull/"


class EmulatorApp:
    """One replica's ASGI callable; its lifespan runs the replica's engine loop."""

    def __init__(
        self,
        replica: Replica,
        tokenizer: Tokenizer,
        pd: PDSettings | None = None,
        ranks: Sequence[Replica] = (),
    ) -> None:
        self.ranks = tuple(ranks) or (replica,)  # a data-parallel engine's; `replica` is rank 0
        self.replica = self.ranks[0]
        self.tokenizer = tokenizer
        self.pd = Disaggregation(replica, pd or PDSettings())
        self.balancer = RankBalancer(self.ranks)
        self.completions = Completions(
            replica, tokenizer, self.pd, self._check_model, self.balancer
        )
        self.generate = (
            Generate(replica, tokenizer, self.balancer) if replica.engine_name == "sglang" else None
        )
        self.utilities = Utilities(replica, tokenizer, self._check_model)
        self.responses = Responses(replica, tokenizer, self.completions, self._check_model)
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
                kind = "chat" if path == "/v1/chat/completions" else "completion"
                await self.completions.serve(kind, scope, receive, send)
            elif method == "POST" and path == "/generate" and self.generate is not None:
                await self.generate.serve(receive, send)
            elif method == "POST" and path in self.utilities.paths:
                data = self._parse(await read_body(receive))
                await respond_json(send, 200, self.utilities.answer(path, data))
            elif path == "/v1/responses" or path.startswith("/v1/responses/"):
                await self.responses.serve(scope, receive, send)
            elif method == "GET" and path == "/health":
                await respond(send, 200, b"", [])
            elif method == "GET" and path == "/v1/models":
                await respond(send, 200, orjson.dumps(self._models()), JSON)
            elif method == "GET" and path == "/load":
                body = orjson.dumps({"server_load": sum(r.in_flight for r in self.ranks)})
                await respond(send, 200, body, JSON)
            elif method == "GET" and path == "/metrics":
                page = render_families([r.metrics.families() for r in self.ranks])
                await respond(send, 200, page, PROMETHEUS)
            elif method == "GET" and path == "/kvgate/cache":
                await respond(send, 200, orjson.dumps(self._cache_view()), JSON)
            elif method == "GET" and path == "/kvgate/dp":
                b = self.balancer
                await respond_json(send, 200, {"named": b.named, "balanced": b.balanced})
            elif method == "POST" and path == "/reset_prefix_cache":
                await self._reset_prefix_cache(send)
            elif method == "POST" and path.startswith(_PULL):
                data = api.parse_json(await read_body(receive))
                await respond_json(send, *await self.pd.serve_pull(path[len(_PULL) :], data))
            elif method == "GET" and path == "/kvgate/pd/handoffs":
                await respond_json(send, 200, self._handoffs_view())
            else:
                await self._probe(method, path, send)
        except api.ApiError as exc:
            await respond(send, exc.status, exc.body(), JSON)

    async def _probe(self, method: str, path: str, send: Send) -> None:
        """What peer routers ask a worker besides vLLM's own routes."""
        body: dict[str, Any]
        if method == "GET" and path in probes.SERVER_INFO:
            body = probes.server_info(self.replica, self.pd, len(self.ranks))
        elif method == "GET" and path in probes.MODEL_INFO:
            body = probes.model_info(self.replica)
        elif method == "GET" and path == "/get_load":
            body = probes.load(self.replica)
        elif method == "POST" and path in probes.RENDER:
            raise probes.render_refused()
        else:
            await respond(send, 404, NOT_FOUND, JSON)
            return
        await respond(send, 200, orjson.dumps(body), JSON)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        await receive()
        async with asyncio.TaskGroup() as tg:
            loops = [tg.create_task(r.run(), name="engine-loop") for r in self.ranks]
            await send({"type": "lifespan.startup.complete"})
            await receive()
            await self.responses.close()
            for loop_task in loops:
                loop_task.cancel()
        await self.pd.close()
        await send({"type": "lifespan.shutdown.complete"})

    def _handoffs_view(self) -> dict[str, Any]:
        held = self.pd.handoffs.held()
        return {
            "role": self.pd.settings.role,
            "protocol": self.pd.settings.protocol,
            "engine_id": self.pd.engine_id,
            "held_blocks": self.replica.engine.stats().held_blocks,
            "handoffs": held,
            "pending": self.pd.handoffs.pending(),
        }

    def _cache_view(self) -> dict[str, Any]:
        config = self.replica.profile.config
        view: dict[str, Any] = {
            "block_size": config.block_size,
            "num_blocks": config.num_blocks,
            "block_hashes": self.replica.cached_block_hashes(),
        }
        if len(self.ranks) > 1:  # each rank's cache apart (`block_hashes`: rank 0's)
            view["ranks"] = [{"block_hashes": r.cached_block_hashes()} for r in self.ranks]
        return view

    async def _reset_prefix_cache(self, send: Send) -> None:
        done = [await r.reset_prefix_cache() for r in self.ranks]
        if not all(done):
            raise api.ApiError(
                409, "KV blocks are still in use: the cache was not reset", "ConflictError"
            )
        await respond(send, 200, b"", [])

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
            "owned_by": self.replica.engine_name,
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

    def _parse(self, body: bytes) -> dict[str, Any]:
        """A utility endpoint's body, refused in its engine's words."""
        if self.replica.engine_name == "sglang":
            return sglang_api.parse_json(body)
        return api.parse_json(body)
