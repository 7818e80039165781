"""An emulated replica's KV-cache events over ZMQ, on vLLM 0.32's wire (`--kv-events-port`).

As vLLM's `ZmqEventPublisher` (`vllm/distributed/kv_events.py`):

- a PUB socket sends one multipart message per engine step that changed the cache:
  `[topic, seq (8 bytes, big-endian, unsigned, from 0), msgpack([ts, [event, ...], rank])]`,
  each event a map with a `type` key and vLLM 0.32's fields (`encode_event`);
- a ROUTER socket (the replay endpoint) keeps the last `buffer_steps` batches. A request is
  `[identity, b"", start_seq (8 bytes big-endian)]` (a REQ socket sends the empty frame); the
  answer is one `[identity, b"", topic, seq, payload]` per kept batch with seq ≥ start_seq,
  then `[identity, b"", b"", (-1 as 8 signed bytes), b""]`, with the topic frame as vLLM 0.32
  sends it. Other frames are dropped, logged.

Everything runs on the emulator's event loop (`zmq.asyncio`; vLLM sends from a thread), and
zmq is imported only when events are on.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Sequence
from typing import Any

import msgpack  # type: ignore[import-untyped]
import zmq
import zmq.asyncio

from routing.kv_events import AllBlocksCleared, BlockStored, KvEvent
from sim.emulator.lora import unsalted

log = logging.getLogger(__name__)

END_SEQ = (-1).to_bytes(8, "big", signed=True)
MEDIUM = "GPU"


def encode_event(event: KvEvent, adapters: Sequence[str] = ()) -> dict[str, Any]:
    """One event as vLLM 0.32 puts it on the wire (a map; LoRA blocks unsalted, with the
    adapter's id, from 1, and name)."""
    if isinstance(event, BlockStored):
        lora_id, tokens = unsalted(event.token_ids)
        name = adapters[lora_id - 1] if lora_id is not None else None
        return {
            "type": "BlockStored",
            "block_hashes": list(event.block_hashes),
            "parent_block_hash": event.parent_block_hash,
            "token_ids": tokens,
            "block_size": event.block_size,
            "lora_id": lora_id,
            "medium": MEDIUM,
            "lora_name": name,
            "extra_keys": [None if name is None else [name]] * len(event.block_hashes),
            "group_idx": 0,
            "kv_cache_spec_kind": "full_attention",
        }
    if isinstance(event, AllBlocksCleared):
        return {"type": "AllBlocksCleared"}
    return {
        "type": "BlockRemoved",
        "block_hashes": list(event.block_hashes),
        "medium": MEDIUM,
        "group_idx": 0,
    }


def _bind(sock: zmq.asyncio.Socket, host: str, port: int) -> str:
    """Bind `sock` on host:port (0: a free port); the endpoint it got."""
    address = f"[{host}]" if ":" in host else host
    sock.bind(f"tcp://{address}:{port or '*'}")
    endpoint = sock.getsockopt(zmq.LAST_ENDPOINT)
    assert isinstance(endpoint, bytes)
    return endpoint.decode()


class KVEventPublisher:
    """One replica's PUB and replay sockets (see the module docstring); `run_replay` answers
    replay requests until cancelled, `close` releases both sockets."""

    def __init__(
        self,
        ctx: zmq.asyncio.Context,
        host: str,
        port: int,
        replay_port: int,
        *,
        topic: str = "",
        adapters: Sequence[str] = (),
        buffer_steps: int = 10_000,
        rank: int = 0,
    ) -> None:
        self._topic = topic.encode()
        self._rank = rank  # the data-parallel rank each batch names
        self._adapters = tuple(adapters)
        self._buffer: deque[tuple[int, bytes]] = deque(maxlen=buffer_steps)
        self._seq = 0
        self._pub = ctx.socket(zmq.PUB)
        self._replay = ctx.socket(zmq.ROUTER)
        for sock in (self._pub, self._replay):
            sock.setsockopt(zmq.LINGER, 0)
        self._pub.set_hwm(100_000)  # vLLM's default
        try:
            self.endpoint = _bind(self._pub, host, port)
            self.replay_endpoint = _bind(self._replay, host, replay_port)
        except zmq.ZMQError:
            self.close()
            raise

    async def publish(self, events: Sequence[KvEvent]) -> None:
        """Send one batch (nothing for no events) and keep it for replay."""
        if not events:
            return
        body = [encode_event(e, self._adapters) for e in events]
        payload = msgpack.packb([time.time(), body, self._rank])
        seq = self._seq
        self._seq += 1
        self._buffer.append((seq, payload))
        # Sequence numbers are taken before the await: batches keep their order.
        await self._pub.send_multipart([self._topic, seq.to_bytes(8, "big"), payload])

    async def run_replay(self) -> None:
        """Answer replay requests, one at a time, until cancelled."""
        while True:
            frames = await self._replay.recv_multipart()
            if len(frames) != 3:
                log.warning("KV-event replay: dropped a request of %d frames", len(frames))
                continue
            client, _, start = frames
            first = int.from_bytes(start, "big")
            # A copy: batches published while this answer is sent join the buffer.
            for seq, payload in [b for b in self._buffer if b[0] >= first]:
                frames = [client, b"", self._topic, seq.to_bytes(8, "big"), payload]
                await self._replay.send_multipart(frames)
            await self._replay.send_multipart([client, b"", b"", END_SEQ, b""])

    def close(self) -> None:
        self._pub.close(linger=0)
        self._replay.close(linger=0)


async def serve_replays(publishers: Sequence[KVEventPublisher]) -> None:
    """Every publisher's replay loop, until cancelled."""
    async with asyncio.TaskGroup() as tg:
        for p in publishers:
            tg.create_task(p.run_replay(), name="kv-event-replay")
