"""The emulator's Responses API: responses stored per replica, followed, fetched, deleted,
cancelled, with vLLM's shapes and errors. The ASGI app is called directly (no socket)."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest

from sim.emulator.app import EmulatorApp
from sim.emulator.replica import Replica
from sim.engine.profiles import get_profile
from sim.engine.tokenizer import BuiltinTokenizer
from sim.workloads import synth_text
from tests.support.asgi_types import Message

MODEL = "emu"


@pytest.fixture
async def app() -> AsyncIterator[EmulatorApp]:
    replica = Replica(get_profile("demo"), MODEL, speedup=1000.0)
    loop_task = asyncio.create_task(replica.run())
    emulator = EmulatorApp(replica, BuiltinTokenizer())
    yield emulator
    await emulator.responses.close()
    loop_task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await loop_task


async def _call(
    app: EmulatorApp, method: str, path: str, body: Any = None
) -> tuple[int, bytes, list[Message]]:
    pending = [{"type": "http.request", "body": orjson.dumps(body) if body else b""}]
    sent: list[Message] = []

    async def receive() -> Message:
        if pending:
            return pending.pop()
        await asyncio.Event().wait()  # the client never hangs up
        raise AssertionError

    async def send(message: Message) -> None:
        sent.append(message)

    scope = {"type": "http", "method": method, "path": path, "headers": []}
    await app(scope, receive, send)
    return sent[0]["status"], b"".join(m.get("body", b"") for m in sent[1:]), sent


async def _json(app: EmulatorApp, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    status, data, _ = await _call(app, method, path, body)
    return status, orjson.loads(data)


def _create(text: str, **fields: Any) -> dict[str, Any]:
    return {"model": MODEL, "input": text, "max_output_tokens": 8, **fields}


async def test_a_stored_response_is_fetched_and_followed_on_its_cache(app: EmulatorApp) -> None:
    question = synth_text(random.Random(1), 300)
    status, first = await _json(app, "POST", "/v1/responses", _create(question))
    assert status == 200
    assert first["object"] == "response" and first["status"] == "completed"
    assert first["id"].startswith("resp_") and len(first["id"]) == 37
    message = first["output"][0]
    assert message["type"] == "message" and message["role"] == "assistant"
    assert message["content"][0]["type"] == "output_text" and message["content"][0]["text"]
    usage = first["usage"]
    assert usage["output_tokens"] == 8 and usage["input_tokens"] > 250
    assert await _json(app, "GET", f"/v1/responses/{first['id']}") == (200, first)

    follow = _create("and then?", previous_response_id=first["id"])
    status, second = await _json(app, "POST", "/v1/responses", follow)
    assert status == 200 and second["previous_response_id"] == first["id"]
    # The earlier turns lead the prompt, so the prefix cache serves them.
    assert second["usage"]["input_tokens"] > usage["input_tokens"] + usage["output_tokens"]
    assert second["usage"]["input_tokens_details"]["cached_tokens"] >= usage["input_tokens"] - 16


async def test_an_unknown_previous_response_is_vllms_404(app: EmulatorApp) -> None:
    follow = _create("and then?", previous_response_id="resp_elsewhere")
    assert await _json(app, "POST", "/v1/responses", follow) == (
        404,
        {
            "error": {
                "message": "Response with id 'resp_elsewhere' not found.",
                "type": "invalid_request_error",
                "param": "response_id",
                "code": 404,
            }
        },
    )
    for method, path in (("GET", "/v1/responses/resp_x"), ("POST", "/v1/responses/resp_x/cancel")):
        status, body = await _json(app, method, path)
        assert status == 404 and body["error"]["param"] == "response_id"
    status, _, _ = await _call(app, "GET", "/v1/responses/resp_x/input_items")
    assert status == 404


async def test_a_response_not_stored_is_not_kept(app: EmulatorApp) -> None:
    status, obj = await _json(app, "POST", "/v1/responses", _create("hi", store=False))
    assert status == 200
    assert (await _json(app, "GET", f"/v1/responses/{obj['id']}"))[0] == 404


async def test_a_stream_announces_its_id_first_and_is_stored(app: EmulatorApp) -> None:
    status, body, sent = await _call(app, "POST", "/v1/responses", _create("hi", stream=True))
    assert status == 200 and dict(sent[0]["headers"])[b"content-type"].startswith(
        b"text/event-stream"
    )
    events = [e for e in body.split(b"\n\n") if e]
    kinds = [e.split(b"\n")[0].removeprefix(b"event: ").decode() for e in events]
    assert kinds[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert kinds[4:-4] == ["response.output_text.delta"] * 8
    assert kinds[-4:] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    data = [orjson.loads(e.split(b"\ndata: ", 1)[1]) for e in events]
    assert [d["sequence_number"] for d in data] == list(range(len(data)))
    created, completed = data[0]["response"], data[-1]["response"]
    assert created["status"] == "in_progress" and completed["status"] == "completed"
    assert created["id"] == completed["id"]
    deltas = "".join(d["delta"] for d in data if d["type"] == "response.output_text.delta")
    assert deltas == completed["output"][0]["content"][0]["text"]
    assert await _json(app, "GET", f"/v1/responses/{created['id']}") == (200, completed)


async def test_delete_forgets_a_response(app: EmulatorApp) -> None:
    _, obj = await _json(app, "POST", "/v1/responses", _create("hi"))
    path = f"/v1/responses/{obj['id']}"
    assert await _json(app, "DELETE", path) == (
        200,
        {"id": obj["id"], "object": "response", "deleted": True},
    )
    assert (await _json(app, "GET", path))[0] == 404
    assert (await _json(app, "DELETE", path))[0] == 404


async def test_a_background_response_runs_on_and_may_be_cancelled(app: EmulatorApp) -> None:
    _, done = await _json(app, "POST", "/v1/responses", _create("hi"))
    status, body = await _json(app, "POST", f"/v1/responses/{done['id']}/cancel")
    assert status == 400 and body["error"]["message"] == "Cannot cancel a synchronous response."

    status, queued = await _json(app, "POST", "/v1/responses", _create("hi", background=True))
    assert status == 200 and queued["status"] == "queued" and queued["background"] is True
    path = f"/v1/responses/{queued['id']}"
    for _ in range(200):  # it completes in the background
        _, obj = await _json(app, "GET", path)
        if obj["status"] == "completed":
            break
        await asyncio.sleep(0.01)
    assert obj["status"] == "completed" and obj["usage"]["output_tokens"] == 8

    long = _create("hi", background=True, max_output_tokens=4000)
    _, running = await _json(app, "POST", "/v1/responses", long)
    path = f"/v1/responses/{running['id']}"
    status, cancelled = await _json(app, "POST", path + "/cancel")
    assert status == 200 and cancelled["status"] == "cancelled"
    assert (await _json(app, "GET", path))[1]["status"] == "cancelled"
    assert app.replica.in_flight == 0  # the generation was aborted


async def test_background_needs_the_store(app: EmulatorApp) -> None:
    status, body = await _json(
        app, "POST", "/v1/responses", _create("hi", background=True, store=False)
    )
    assert status == 400 and body["error"]["param"] == "background"
