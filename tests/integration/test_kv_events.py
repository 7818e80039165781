"""The KV-event subscriber against a real ZMQ publisher (and replay ROUTER) on 127.0.0.1."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import msgpack  # type: ignore[import-untyped]
import pytest
import zmq

from adapters.kv_events import AllBlocksCleared, BlockRemoved, KvEventBatch
from health.kv_events import KvEventsSettings, KvEventSubscriber
from tests.conftest import StartEngines
from tests.integration.conftest import StartGateway
from tests.support.kv_publisher import KvPublisher
from tests.support.waiting import async_wait_until, wait_until

STORED = {"type": "BlockStored", "block_hashes": [11], "parent_block_hash": None}
STORED |= {"token_ids": [1, 2], "block_size": 2, "lora_id": None, "medium": "GPU"}


class Received:
    def __init__(self, fail_on: int | None = None) -> None:
        self.batches: list[KvEventBatch] = []
        self.fail_on = fail_on

    def __call__(self, backend_id: str, batch: KvEventBatch) -> None:
        assert backend_id == "engine-a"
        self.batches.append(batch)
        if batch.seq == self.fail_on:
            raise RuntimeError("consumer bug")

    @property
    def seqs(self) -> list[int]:
        return [b.seq for b in self.batches]


@contextlib.asynccontextmanager
async def following(
    publisher: KvPublisher, received: Received, replay: bool = True, topic: str = "kv-events"
) -> AsyncIterator[KvEventSubscriber]:
    settings = KvEventsSettings(
        endpoint=publisher.endpoint,
        replay=publisher.replay_endpoint if replay else None,
        topic=topic,
        backoff_first_s=0.02,
        backoff_max_s=0.2,
        replay_timeout_s=1.0,
    )
    subscriber = KvEventSubscriber("engine-a", settings, received)
    task = asyncio.create_task(subscriber.run())
    try:
        yield subscriber
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        assert task.cancelled()


@pytest.fixture
async def publisher() -> AsyncIterator[KvPublisher]:
    pub = KvPublisher()
    yield pub
    await pub.close()


async def joined(publisher: KvPublisher, delivered: Callable[[], int], goal: int = 1) -> None:
    """Resend the last batch until the subscriber has it (a SUB misses what precedes its
    subscription reaching the PUB); the repeats are duplicates it drops."""
    for _ in range(500):
        if delivered() >= goal:
            return
        await publisher.resend_last()
        await asyncio.sleep(0.01)
    raise AssertionError("the subscriber never received a batch")


async def test_a_gap_is_filled_from_the_replay_socket(publisher: KvPublisher) -> None:
    received = Received()
    async with following(publisher, received) as sub:
        await publisher.publish([STORED])
        await joined(publisher, lambda: sub.counters.batches)
        await publisher.publish([STORED, {"type": "BlockRemoved", "block_hashes": [11]}])
        await publisher.publish([["AllBlocksCleared"]], drop=True)
        await publisher.publish([["BlockRemoved", [b"\x00" * 24 + (5).to_bytes(8, "big")]]], True)
        await publisher.publish([])
        await async_wait_until(lambda: sub.counters.batches == 5)

    assert received.seqs == [0, 1, 2, 3, 4]
    assert received.batches[2].events == (AllBlocksCleared(),)
    assert received.batches[3].events == (BlockRemoved((5,), None),)
    assert publisher.replay_requests == [2]
    c = sub.counters
    assert (c.gaps, c.replayed, c.missed, c.last_seq, c.events) == (1, 2, 0, 4, 5)
    assert c.duplicates >= 0 and c.decode_errors == 0


@pytest.mark.parametrize("topic_in_replay", [True, False], ids=["vllm-0.32", "no-topic"])
async def test_the_replay_ends_at_vllms_end_marker(topic_in_replay: bool) -> None:
    """vLLM 0.32 sends `[b"", topic, seq, payload]` per batch and ends with `[b"", b"", -1,
    b""]`: the end is recognised at once, not after the replay timeout (seen against real
    vLLM: a 4-frame end marker was a decode error and the gap took the whole timeout)."""
    publisher = KvPublisher(topic_in_replay=topic_in_replay)
    received = Received()
    settings = KvEventsSettings(
        endpoint=publisher.endpoint, replay=publisher.replay_endpoint, replay_timeout_s=30.0
    )
    subscriber = KvEventSubscriber("engine-a", settings, received)
    task = asyncio.create_task(subscriber.run())
    try:
        await publisher.publish([STORED])
        await joined(publisher, lambda: subscriber.counters.batches)
        for drop in (True, True, False):
            await publisher.publish([STORED], drop=drop)
        await async_wait_until(lambda: subscriber.counters.last_seq == 3, within=5.0)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await publisher.close()
    c = subscriber.counters
    assert received.seqs == [0, 1, 2, 3]
    assert (c.gaps, c.replayed, c.missed, c.decode_errors) == (1, 2, 0, 0)


async def test_what_the_replay_buffer_lost_is_counted(publisher: KvPublisher) -> None:
    received = Received()
    async with following(publisher, received) as sub:
        await publisher.publish([STORED])
        await joined(publisher, lambda: sub.counters.batches)
        for drop in (False, True, True):
            await publisher.publish([STORED], drop=drop)
        del publisher.buffer[2]  # vLLM keeps the last buffer_steps batches only
        await publisher.publish([STORED])
        await async_wait_until(lambda: sub.counters.last_seq == 4)

    assert received.seqs == [0, 1, 3, 4]
    assert (sub.counters.gaps, sub.counters.replayed, sub.counters.missed) == (1, 1, 1)


async def test_without_replay_the_gap_is_recorded(publisher: KvPublisher) -> None:
    received = Received()
    async with following(publisher, received, replay=False) as sub:
        await publisher.publish([STORED])
        await joined(publisher, lambda: sub.counters.batches)
        for drop in (False, True, True, False):
            await publisher.publish([STORED], drop=drop)
        await async_wait_until(lambda: sub.counters.last_seq == 4)

    assert received.seqs == [0, 1, 4]
    assert (sub.counters.gaps, sub.counters.missed, sub.counters.replayed) == (1, 2, 0)
    assert publisher.replay_requests == []


async def test_garbage_and_a_failing_consumer_do_not_stop_the_stream(
    publisher: KvPublisher,
) -> None:
    received = Received(fail_on=1)
    async with following(publisher, received) as sub:
        await publisher.publish([STORED])
        await joined(publisher, lambda: sub.counters.batches)
        await publisher.send_raw([b"kv-events", b"short", b"junk"])
        await publisher.send_raw([b"kv-events"])
        await publisher.send_raw([b"kv-events", (1).to_bytes(8, "big"), b"\xc1\xc1"])
        await publisher.send_raw([b"other-topic", (1).to_bytes(8, "big"), b"\xc1"])
        await publisher.publish([STORED])  # seq 1: the consumer raises on it
        await publisher.publish([{"type": "FutureEvent"}, STORED])
        await async_wait_until(lambda: sub.counters.last_seq == 2)

    assert received.seqs == [0, 1, 2]
    c = sub.counters
    assert (c.decode_errors, c.callback_errors, c.skipped_events, c.gaps) == (3, 1, 1, 0)


async def test_a_restarted_publisher_is_followed_again() -> None:
    received = Received()
    first = KvPublisher()
    ports = (first.port, first.replay_port)
    async with following(first, received) as sub:
        await first.publish([STORED])
        await joined(first, lambda: sub.counters.batches)
        await first.publish([STORED])
        await first.publish([STORED])
        await async_wait_until(lambda: sub.counters.last_seq == 2)
        await first.close()

        second = KvPublisher(port=ports[0], replay_port=ports[1])
        try:
            await second.publish([["AllBlocksCleared"]])
            await joined(second, lambda: sub.counters.restarts)
            await second.publish([STORED])
            await async_wait_until(lambda: sub.counters.last_seq == 1)
        finally:
            await second.close()

    assert received.seqs == [0, 1, 2, 0, 1]
    assert received.batches[3].events == (AllBlocksCleared(),)
    assert (sub.counters.restarts, sub.counters.gaps) == (1, 0)


def test_the_gateway_counts_each_backends_batches(
    fake_engines: StartEngines, start_gateway: StartGateway, client: Callable[..., httpx.Client]
) -> None:
    [(_engine, s1), (_e2, s2)] = fake_engines(2)
    ctx = zmq.Context()
    pub = ctx.socket(zmq.PUB)
    try:
        port = pub.bind_to_random_port("tcp://127.0.0.1")
        with_events = {"url": s1.url, "id": "a", "kv_events": f"tcp://127.0.0.1:{port}"}
        _, gw = start_gateway([with_events, {"url": s2.url, "id": "b"}])
        admin = client(gw)
        payload = msgpack.packb([0.0, [STORED, STORED], 0])

        def state() -> dict[str, Any]:
            pub.send_multipart([b"kv-events", (0).to_bytes(8, "big"), payload])
            return {b["id"]: b for b in admin.get("/admin/backends").json()["backends"]}

        wait_until(lambda: state()["a"]["kv_events"]["batches"] == 1)
        backends = state()
        assert backends["a"]["kv_events"]["events"] == 2
        assert backends["a"]["kv_events"]["last_seq"] == 0
        assert "kv_events" not in backends["b"]
        assert admin.get("/admin/backends").json()["loops"]["kv-events:a"] == "running"
        page = admin.get("/metrics").text
        assert 'kvgate_kv_events_batches_total{backend="a"} 1.0' in page
        assert 'kvgate_kv_events_events_total{backend="a"} 2.0' in page
        assert 'kvgate_kv_events_last_seq{backend="a"} 0.0' in page
        assert 'kvgate_kv_events_batches_total{backend="b"}' not in page
        assert 'kvgate_backend_scrape_errors_total{backend="a"} 0.0' in page
        assert 'kvgate_backend_metrics_age_seconds{backend="a"}' in page
    finally:
        ctx.destroy(linger=0)
