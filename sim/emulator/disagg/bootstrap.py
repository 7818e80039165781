"""An SGLang prefill replica's bootstrap port: where decode replicas join bootstrap rooms.

Routes: `POST /kvgate/pd/rooms/{room}` (a D joins the room and is answered once P has
prefilled and pushed the room's KV: `{prompt_tokens, blocks, moved_blocks, transfer_s}`;
410 if P gave up on the room, 409 if another D took it; a D that hangs up leaves the room,
which P then gives up), `GET /health`. SGLang's own
bootstrap server speaks another protocol between engines; routers only pass the port on.
"""

from __future__ import annotations

import asyncio
from typing import Any

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
                answer = await self._unless_gone(path[len(_ROOMS) :], data, receive)
                if answer is not None:
                    await respond_json(send, *answer)
            elif method == "GET" and path == "/health":
                await respond(send, 200, b"", [])
            else:
                await respond(send, 404, NOT_FOUND, JSON)
        except api.ApiError as exc:
            await respond(send, exc.status, exc.body(), JSON)

    async def _unless_gone(
        self, room: str, data: dict[str, Any], receive: Receive
    ) -> tuple[int, dict[str, Any]] | None:
        """`serve_room`, cancelled if D hangs up first (None: nobody to answer)."""
        join = asyncio.ensure_future(self.pd.serve_room(room, data))
        gone = asyncio.ensure_future(_disconnect(receive))
        try:
            await asyncio.wait((join, gone), return_when=asyncio.FIRST_COMPLETED)
        finally:
            gone.cancel()
            if not join.done():
                join.cancel()
            await asyncio.wait((join, gone))
        return None if join.cancelled() else join.result()


async def _disconnect(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
