"""`kvgate emulate --kv-events-port 0`: the events on the wire, replayed into a set, equal the
replica's cache after a workload that evicts; the replay socket resends what was missed."""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import msgpack  # type: ignore[import-untyped]
import pytest
import zmq

from adapters.kv_events import KvEventBatch
from health.kv_events import KvEventsSettings, KvEventSubscriber
from sim.live.processes import ChildProcess, start_emulator
from sim.workloads import synth_text

END_SEQ = (-1).to_bytes(8, "big", signed=True)
TOPIC = b"kv-test"


def decode(frames: list[bytes]) -> tuple[int, list[dict[str, Any]]]:
    """(seq, events) of one `[seq, payload]` pair: payload msgpack([ts, events, dp_rank])."""
    seq, payload = frames
    ts, events, dp_rank = msgpack.unpackb(payload)
    assert isinstance(ts, float) and dp_rank == 0
    return int.from_bytes(seq, "big"), events


def apply(cached: set[int], events: list[dict[str, Any]]) -> None:
    for ev in events:
        if ev["type"] == "BlockStored":
            parent = ev["parent_block_hash"]
            assert parent is None or parent in cached
            assert len(ev["token_ids"]) == ev["block_size"] * len(ev["block_hashes"])
            assert ev["medium"] == "GPU" and ev["lora_id"] is None
            cached.update(ev["block_hashes"])
        elif ev["type"] == "BlockRemoved":
            assert set(ev["block_hashes"]) <= cached
            cached.difference_update(ev["block_hashes"])
        else:
            assert ev == {"type": "AllBlocksCleared"}
            cached.clear()


@pytest.fixture
def emulator(tmp_path: Path) -> Iterator[tuple[ChildProcess, str, str, str]]:
    extra = ["--kv-events-port", "0", "--kv-events-topic", TOPIC.decode()]
    extra += ["--num-gpu-blocks", "48"]
    child, [url] = start_emulator(1, "demo", "emu", tmp_path / "emu.log", speedup=50, extra=extra)
    try:
        [m] = child.wait_for_line(r"^replica 0 kv-events: (\S+) replay (\S+)")
        yield child, url, m.group(1), m.group(2)
    finally:
        child.stop()


def _receive_all(sub: zmq.Socket[bytes], quiet_ms: int = 300) -> dict[int, list[dict[str, Any]]]:
    batches = {}
    while sub.poll(quiet_ms):
        topic, *rest = sub.recv_multipart()
        assert topic == TOPIC
        seq, events = decode(rest)
        batches[seq] = events
    return batches


def _replay(
    ctx: zmq.Context[zmq.Socket[bytes]], endpoint: str, start: int, topic: bytes = TOPIC
) -> dict[int, Any]:
    dealer = ctx.socket(zmq.DEALER)  # vLLM's request: [identity, b"", start_seq] at the ROUTER
    dealer.connect(endpoint)
    try:
        dealer.send_multipart([b"", start.to_bytes(8, "big")])
        batches = {}
        while True:
            assert dealer.poll(5000), "no end-of-replay marker"
            empty, got, *frames = dealer.recv_multipart()  # vLLM 0.32 sends the topic too
            assert empty == b""
            if frames[0] == END_SEQ:
                assert got == b"" and frames[1] == b""
                return batches
            assert got == topic
            seq, events = decode(frames)
            batches[seq] = events
    finally:
        dealer.close(linger=0)


def test_events_replay_into_the_replicas_cache(
    emulator: tuple[ChildProcess, str, str, str],
) -> None:
    _, url, endpoint, replay_endpoint = emulator
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    sub.connect(endpoint)
    rng = random.Random(3)
    prefixes = [synth_text(rng, 160) for _ in range(3)]
    try:
        with httpx.Client(base_url=url, timeout=30) as client:
            for i in range(18):
                prompt = prefixes[i % 3] + synth_text(rng, 60)
                body = {"model": "emu", "prompt": prompt, "max_tokens": 8}
                assert client.post("/v1/completions", json=body).status_code == 200
            live = _receive_all(sub)
            assert live  # the PUB socket delivers (its first batches may precede the join)
            cache = client.get("/kvgate/cache").json()
            # The SUB socket may join late (ZMQ's slow joiner): replay fills the start.
            replayed = _replay(ctx, replay_endpoint, 0)
            assert sorted(replayed) == list(range(len(replayed)))
            assert all(replayed[seq] == events for seq, events in live.items())
            cached: set[int] = set()
            for seq in sorted(replayed):
                apply(cached, replayed[seq])
            assert cached == set(cache["block_hashes"]) and cached
            removed = sum(e["type"] == "BlockRemoved" for b in replayed.values() for e in b)
            assert removed > 0  # 48 blocks of 16 tokens could not hold it all

            assert client.post("/reset_prefix_cache").status_code == 200
            [(seq, events)] = _receive_all(sub).items()
            assert seq == len(replayed) and events == [{"type": "AllBlocksCleared"}]
            assert client.get("/kvgate/cache").json()["block_hashes"] == []
            assert list(_replay(ctx, replay_endpoint, seq)) == [seq]
    finally:
        sub.close(linger=0)
        ctx.term()


def test_lora_blocks_carry_the_adapter_and_the_prompts_own_tokens(tmp_path: Path) -> None:
    extra = ["--kv-events-port", "0", "--lora", "ad"]
    child, [url] = start_emulator(1, "demo", "emu", tmp_path / "emu.log", speedup=50, extra=extra)
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    try:
        [m] = child.wait_for_line(r"^replica 0 kv-events: (\S+) replay (\S+)")
        prompt = synth_text(random.Random(5), 100)
        with httpx.Client(base_url=url, timeout=30) as client:
            body = {"model": "ad", "prompt": prompt, "max_tokens": 4}
            assert client.post("/v1/completions", json=body).status_code == 200
            ids = client.post("/tokenize", json={"model": "ad", "prompt": prompt}).json()["tokens"]
        stored = [e for b in _replay(ctx, m.group(2), 0, b"").values() for e in b]
        first = stored[0]
        assert (first["type"], first["lora_id"], first["lora_name"]) == ("BlockStored", 1, "ad")
        assert first["extra_keys"][0] == ["ad"]
        assert first["token_ids"] == ids[: len(first["token_ids"])]
    finally:
        ctx.term()
        child.stop()


def test_the_gateways_subscriber_follows_the_emulators_events(
    emulator: tuple[ChildProcess, str, str, str],
) -> None:
    """The two sides of issue 16 agree on the wire: the gateway's decoder and subscriber
    (`kvgate serve` with `kv_events` on the backend) read every batch the emulator publishes,
    with no gap, no decode error and the emulator's own last sequence number."""
    _, url, endpoint, replay = emulator
    received: list[KvEventBatch] = []
    settings = KvEventsSettings(endpoint=endpoint, replay=replay, topic=TOPIC.decode())
    subscriber = KvEventSubscriber("emu", settings, lambda _id, batch: received.append(batch))

    async def run() -> None:
        task = asyncio.create_task(subscriber.run())
        await asyncio.sleep(0.5)  # the SUB socket joins before the workload starts
        async with httpx.AsyncClient(base_url=url, timeout=30) as client:
            for i in range(12):
                prompt = synth_text(random.Random(i % 4), 400)
                body = {"model": "emu", "prompt": prompt, "max_tokens": 4}
                (await client.post("/v1/completions", json=body)).raise_for_status()
        await asyncio.sleep(1.0)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    asyncio.run(run())
    stored = sum(len(e.block_hashes) for b in received for e in b.events if hasattr(e, "token_ids"))
    assert received and stored > 0
    seqs = [b.seq for b in received]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    counters = subscriber.counters
    assert counters.decode_errors == 0 and counters.missed == 0
    cached = set(httpx.get(url + "/kvgate/cache").json()["block_hashes"])
    held: set[int] = set()
    for batch in received:
        for event in batch.events:
            if hasattr(event, "token_ids"):
                held.update(event.block_hashes)
            elif hasattr(event, "block_hashes"):
                held.difference_update(event.block_hashes)
            else:
                held.clear()
    assert held == cached
