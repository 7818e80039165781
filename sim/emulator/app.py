"""The ASGI app of one emulated replica: vLLM's HTTP surface over a `Replica`.

Routes: `POST /v1/chat/completions`, `/v1/completions` (streaming or not; `inference`),
`/tokenize`; `GET /v1/models`, `/health`, `/load`, `/metrics`; and what peer routers probe
(see `probes`): `GET /server_info`, `/get_server_info`, `/model_info`, `/get_model_info`,
`/get_load`, and `POST /v1/completions/render`, `/v1/chat/completions/render` (403). Also
`POST /reset_prefix_cache` (vLLM's, served in its dev mode; 409 while requests hold blocks),
`GET /kvgate/cache`, the cached block hashes as KV events name them (for tests), and for P/D
(`sim.emulator.disagg`) `POST /kvgate/pd/pull/{id}` (a vLLM D pulls a handoff) and
`GET /kvgate/pd/handoffs` (the prefills whose blocks this replica holds). The replica's LoRA
adapters are models of their own, listed with the base model as their `parent` and served by
the same engine model (see `sim.emulator.lora`).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import orjson

from sim.emulator import openai_api as api
from sim.emulator import probes
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
from sim.emulator.disagg.coordinator import Disaggregation
from sim.emulator.disagg.settings import PDSettings
from sim.emulator.inference import Completions
from sim.emulator.replica import Replica
from sim.engine.tokenizer import Tokenizer

_PULL = "/kvgate/pd/pull/"


class EmulatorApp:
    """One replica's ASGI callable; its lifespan runs the replica's engine loop."""

    def __init__(
        self, replica: Replica, tokenizer: Tokenizer, pd: PDSettings | None = None
    ) -> None:
        self.replica = replica
        self.tokenizer = tokenizer
        self.pd = Disaggregation(replica, pd or PDSettings())
        self.completions = Completions(replica, tokenizer, self.pd, self._check_model)
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
            elif method == "POST" and path == "/tokenize":
                await self._tokenize(receive, send)
            elif method == "GET" and path == "/health":
                await respond(send, 200, b"", [])
            elif method == "GET" and path == "/v1/models":
                await respond(send, 200, orjson.dumps(self._models()), JSON)
            elif method == "GET" and path == "/load":
                body = orjson.dumps({"server_load": self.replica.in_flight})
                await respond(send, 200, body, JSON)
            elif method == "GET" and path == "/metrics":
                await respond(send, 200, self.replica.metrics.render(), PROMETHEUS)
            elif method == "GET" and path == "/kvgate/cache":
                await respond(send, 200, orjson.dumps(self._cache_view()), JSON)
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
            body = probes.server_info(self.replica, self.pd)
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
            loop_task = tg.create_task(self.replica.run(), name="engine-loop")
            await send({"type": "lifespan.startup.complete"})
            await receive()
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
        data = api.parse_json(await read_body(receive))
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
        await respond(send, 200, orjson.dumps(body), JSON)
