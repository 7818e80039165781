"""An SGLang prefill replica's bootstrap port: where decode replicas join bootstrap rooms.

Routes: `POST /kvgate/pd/rooms/{room}` (a D joins the room and is answered once P has
prefilled and pushed the room's KV: `{prompt_tokens, blocks, moved_blocks, transfer_s}`;
410 if P gave up on the room, 409 if another D took it), `GET /health`. SGLang's own
bootstrap server speaks another protocol between engines; routers only pass the port on.
"""

from __future__ import annotations

from sim.emulator import openai_api as api
from sim.emulator.asgi import (
    JSON,
    NOT_FOUND,
    Receive,
    Scope,
    Send,
    read_body,
    respond,
    respond_json,
)
from sim.emulator.disagg.coordinator import Disaggregation

_ROOMS = "/kvgate/pd/rooms/"


class BootstrapApp:
    """The ASGI app on one prefill replica's bootstrap port."""

    def __init__(self, pd: Disaggregation) -> None:
        self.pd = pd

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await receive()
            await send({"type": "lifespan.startup.complete"})
            await receive()
            await send({"type": "lifespan.shutdown.complete"})
            return
        if scope["type"] != "http":
            return
        path, method = scope["path"], scope["method"]
        try:
            if method == "POST" and path.startswith(_ROOMS):
                data = api.parse_json(await read_body(receive) or b"{}")
                await respond_json(send, *await self.pd.serve_room(path[len(_ROOMS) :], data))
            elif method == "GET" and path == "/health":
                await respond(send, 200, b"", [])
            else:
                await respond(send, 404, NOT_FOUND, JSON)
        except api.ApiError as exc:
            await respond(send, exc.status, exc.body(), JSON)
