"""The drain state and how a response cut by the shutdown grace ends (no sockets)."""

from __future__ import annotations

import asyncio
import signal

import orjson
import pytest
import uvicorn

from gateway.asgi import Message, TrackedSend
from gateway.lifecycle import Drain, GatewayServer, end_response
from gateway.proxy import BrokenBodyError

SSE = [(b"content-type", b"text/event-stream")]


class Sent:
    def __init__(self) -> None:
        self.messages: list[Message] = []

    async def __call__(self, message: Message) -> None:
        self.messages.append(message)


async def _started(headers: list[tuple[bytes, bytes]], *bodies: bytes) -> tuple[TrackedSend, Sent]:
    sent = Sent()
    send = TrackedSend(sent)
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    for body in bodies:
        await send({"type": "http.response.body", "body": body, "more_body": True})
    return send, sent


async def test_a_stream_at_an_event_boundary_ends_with_an_error_event() -> None:
    send, sent = await _started(SSE, b'data: {"a": 1}\n\n')
    await end_response(send)
    last = sent.messages[-1]
    assert last["more_body"] is False and last["body"].endswith(b"\n\n")
    event = orjson.loads(last["body"].removeprefix(b"data: "))
    assert event["error"]["code"] == "gateway_shutting_down"


@pytest.mark.parametrize(
    ("headers", "body"), [(SSE, b'data: {"a"'), ([(b"content-type", b"application/json")], b"{")]
)
async def test_a_body_cut_mid_way_is_dropped(
    headers: list[tuple[bytes, bytes]], body: bytes
) -> None:
    send, _ = await _started(headers, body)
    with pytest.raises(BrokenBodyError):
        await end_response(send)


async def test_a_response_not_started_gets_503() -> None:
    sent = Sent()
    await end_response(TrackedSend(sent))
    assert sent.messages[0]["status"] == 503
    assert (b"connection", b"close") in sent.messages[0]["headers"]


async def test_end_responses_cancels_only_the_work_it_runs() -> None:
    drain = Drain()
    sent = Sent()
    started = asyncio.Event()

    async def work() -> bool:
        started.set()
        await asyncio.sleep(60)
        return True

    task = asyncio.create_task(drain.run(work(), TrackedSend(sent)))
    await started.wait()
    assert drain.end_responses() == 1
    assert await task is None  # ended, not raised
    assert sent.messages[0]["status"] == 503
    assert drain.end_responses() == 0


async def test_while_draining_responses_close_their_connection() -> None:
    drain = Drain()
    sent = Sent()
    assert drain.send_for(sent) is sent
    drain.start()
    await drain.send_for(sent)({"type": "http.response.start", "status": 200, "headers": []})
    assert sent.messages[0]["headers"] == [(b"connection", b"close")]


def test_sigterm_drains_first_and_a_second_one_stops_waiting() -> None:
    drain = Drain()
    server = GatewayServer(uvicorn.Config(Sent()), drain, drain_delay_s=5, grace_s=30)
    server.handle_exit(signal.SIGTERM, None)
    assert drain.draining and not server.should_exit
    server.handle_exit(signal.SIGTERM, None)
    assert server.should_exit
    assert server.config.timeout_graceful_shutdown is not None
    assert server.config.timeout_graceful_shutdown > 30  # the grace is kept by the server
