from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest

from gateway.asgi import (
    DISCONNECT_EXTENSION,
    DisconnectSignal,
    Message,
    TrackedSend,
    disconnect_signal,
    header_map,
    read_body,
    run_until_disconnect,
    send_bytes,
    send_json,
)
from gateway.errors import ClientDisconnectedError, PayloadTooLargeError

DISCONNECT: Message = {"type": "http.disconnect"}


class FakeReceive:
    """An ASGI `receive` fed from a queue; waits (like a real server) when nothing is queued."""

    def __init__(self, *messages: Message) -> None:
        self.queue: asyncio.Queue[Message] = asyncio.Queue()
        self.calls = 0
        self.idle = asyncio.Event()  # set once a caller waits on an empty queue
        for message in messages:
            self.queue.put_nowait(message)

    async def __call__(self) -> Message:
        self.calls += 1
        if self.queue.empty():
            self.idle.set()
        return await self.queue.get()


def _chunk(body: bytes, more: bool) -> Message:
    return {"type": "http.request", "body": body, "more_body": more}


def _other_tasks() -> set[asyncio.Task[Any]]:
    return asyncio.all_tasks() - {asyncio.current_task()}


# -- read_body ----------------------------------------------------------------------------


async def test_read_body_single_message() -> None:
    assert await read_body(FakeReceive(_chunk(b'{"a": 1}', False)), 100) == b'{"a": 1}'


async def test_read_body_joins_chunks() -> None:
    receive = FakeReceive(_chunk(b"ab", True), _chunk(b"", True), _chunk(b"cd", False))
    assert await read_body(receive, 100) == b"abcd"
    assert receive.calls == 3


async def test_read_body_without_body_key() -> None:
    assert await read_body(FakeReceive({"type": "http.request"}), 100) == b""


async def test_read_body_at_the_limit() -> None:
    receive = FakeReceive(_chunk(b"12345", True), _chunk(b"67890", False))
    assert await read_body(receive, 10) == b"1234567890"


async def test_read_body_over_the_limit() -> None:
    receive = FakeReceive(_chunk(b"123456", True), _chunk(b"78901", True), _chunk(b"x", False))
    with pytest.raises(PayloadTooLargeError, match="limit of 10 bytes") as info:
        await read_body(receive, 10)
    assert info.value.status == 413
    assert receive.calls == 2  # stops reading as soon as the limit is passed


async def test_read_body_disconnect() -> None:
    receive = FakeReceive(_chunk(b"ab", True), DISCONNECT)
    with pytest.raises(ClientDisconnectedError) as caught:
        await read_body(receive, 100)
    assert caught.value.status == 499  # recorded as such, never a cancelled task's traceback


# -- run_until_disconnect -----------------------------------------------------------------


async def test_work_finishes_first() -> None:
    receive = FakeReceive()
    done: list[str] = []

    async def work() -> None:
        await asyncio.sleep(0)
        done.append("work")

    assert await run_until_disconnect(work(), receive) is False
    assert done == ["work"]
    assert _other_tasks() == set()


async def test_disconnect_cancels_work() -> None:
    receive = FakeReceive()
    started = asyncio.Event()
    events: list[str] = []

    async def work() -> None:
        try:
            started.set()
            await asyncio.sleep(60)
            events.append("finished")
        except asyncio.CancelledError:
            events.append("cancelled")
            raise
        finally:
            events.append("finally")

    async def disconnect_later() -> None:
        await started.wait()
        receive.queue.put_nowait(DISCONNECT)

    feeder = asyncio.create_task(disconnect_later())
    assert await asyncio.wait_for(run_until_disconnect(work(), receive), 5) is True
    await feeder
    assert events == ["cancelled", "finally"]
    assert _other_tasks() == set()


async def test_other_messages_do_not_count_as_disconnect() -> None:
    receive = FakeReceive(_chunk(b"", False), {"type": "http.request"})
    release = asyncio.Event()

    async def work() -> None:
        await release.wait()

    async def release_later() -> None:
        await receive.idle.wait()  # both queued messages read, the watcher waits again
        release.set()

    feeder = asyncio.create_task(release_later())
    assert await asyncio.wait_for(run_until_disconnect(work(), receive), 5) is False
    await feeder
    assert receive.calls == 3
    assert _other_tasks() == set()


async def test_work_exception_is_reraised() -> None:
    class Boom(Exception):
        pass

    async def work() -> None:
        await asyncio.sleep(0)
        raise Boom("upstream broke")

    with pytest.raises(Boom, match="upstream broke"):
        await run_until_disconnect(work(), FakeReceive())
    assert _other_tasks() == set()


async def test_being_cancelled_cancels_work_and_watcher() -> None:
    receive = FakeReceive()
    started = asyncio.Event()
    events: list[str] = []

    async def work() -> None:
        started.set()
        try:
            await asyncio.sleep(60)
        finally:
            events.append("finally")

    outer = asyncio.create_task(run_until_disconnect(work(), receive))
    await started.wait()
    outer.cancel()
    with pytest.raises(asyncio.CancelledError):
        await outer
    assert events == ["finally"]
    assert _other_tasks() == set()


async def test_disconnect_after_the_response_finished_cancels_nothing() -> None:
    receive = FakeReceive()
    events: list[str] = []

    async def work() -> None:
        receive.queue.put_nowait(DISCONNECT)  # what uvicorn reports once the response is out
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        events.append("finished")

    assert await run_until_disconnect(work(), receive, lambda: True) is False
    assert events == ["finished"]
    assert _other_tasks() == set()


# -- run_until_disconnect with the server's disconnect signal ------------------------------


def test_disconnect_signal_fires_once() -> None:
    calls: list[str] = []
    signal = DisconnectSignal()
    signal.fire()  # nobody listening yet: remembered
    assert signal.disconnected
    signal.callback = lambda: calls.append("x")
    signal.fire()
    assert calls == []  # fired already


async def test_signal_disconnect_cancels_work_without_a_watcher_task() -> None:
    signal, receive = DisconnectSignal(), FakeReceive()
    started = asyncio.Event()
    events: list[str] = []

    async def work() -> None:
        started.set()
        # No watcher task parked in receive().
        assert not any(".watch" in repr(t.get_coro()) for t in _other_tasks())
        try:
            await asyncio.sleep(60)
        finally:
            events.append("finally")

    async def disconnect_later() -> None:
        await started.wait()
        signal.fire()

    feeder = asyncio.create_task(disconnect_later())
    assert await asyncio.wait_for(run_until_disconnect(work(), receive, signal=signal), 5)
    await feeder
    assert events == ["finally"]
    assert receive.calls == 0
    assert signal.callback is None


async def test_signal_work_finishes_first() -> None:
    signal = DisconnectSignal()

    async def work() -> None:
        await asyncio.sleep(0)

    assert await run_until_disconnect(work(), FakeReceive(), signal=signal) is False
    assert signal.callback is None
    signal.fire()  # a late disconnect reaches nobody


async def test_signal_already_disconnected_sends_nothing() -> None:
    signal = DisconnectSignal()
    signal.fire()
    ran: list[str] = []

    async def work() -> None:
        ran.append("work")

    assert await run_until_disconnect(work(), FakeReceive(), signal=signal) is True
    assert ran == []


async def test_signal_disconnect_after_the_response_finished_cancels_nothing() -> None:
    signal = DisconnectSignal()
    events: list[str] = []

    async def work() -> None:
        signal.fire()
        await asyncio.sleep(0)
        events.append("finished")

    assert await run_until_disconnect(work(), FakeReceive(), lambda: True, signal) is False
    assert events == ["finished"]


def test_disconnect_signal_from_the_scope() -> None:
    signal = DisconnectSignal()
    assert disconnect_signal({"extensions": {DISCONNECT_EXTENSION: signal}}) is signal
    assert disconnect_signal({"extensions": {}}) is None
    assert disconnect_signal({}) is None


async def test_tracked_send_sees_the_last_body_message() -> None:
    send = TrackedSend(RecordingSend())
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"a", "more_body": True})
    assert not send.finished
    await send({"type": "http.response.body", "body": b""})
    assert send.finished


# -- small helpers ------------------------------------------------------------------------


class RecordingSend:
    def __init__(self) -> None:
        self.messages: list[Message] = []

    async def __call__(self, message: Message) -> None:
        self.messages.append(message)


async def test_send_json() -> None:
    send = RecordingSend()
    await send_json(send, 503, {"ok": False}, headers=[(b"retry-after", b"1")])
    start, body = send.messages
    assert start == {
        "type": "http.response.start",
        "status": 503,
        "headers": [
            (b"content-type", b"application/json"),
            (b"content-length", b"12"),
            (b"retry-after", b"1"),
        ],
    }
    assert body == {"type": "http.response.body", "body": orjson.dumps({"ok": False})}


async def test_send_bytes_content_type() -> None:
    send = RecordingSend()
    await send_bytes(send, 200, b"ok", b"text/plain")
    assert send.messages[0]["headers"] == [
        (b"content-type", b"text/plain"),
        (b"content-length", b"2"),
    ]


async def test_tracked_send() -> None:
    inner = RecordingSend()
    send = TrackedSend(inner)
    assert (send.started, send.status) == (False, 0)
    await send_bytes(send, 201, b"")
    assert (send.started, send.status) == (True, 201)
    assert len(inner.messages) == 2


def test_header_map_lower_cases_and_last_wins() -> None:
    scope = {"headers": [(b"X-Session-ID", b"a"), (b"x-session-id", b"b"), (b"Accept", b"*/*")]}
    assert header_map(scope) == {"x-session-id": "b", "accept": "*/*"}
