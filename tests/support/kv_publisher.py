"""A KV-event publisher that behaves as vLLM's on the wire: PUB for live batches, ROUTER for
replay (request `[identity, b"", start_seq]`; vLLM 0.32 answers `[identity, b"", topic, seq,
payload]` per buffered batch from `start_seq`, then `[identity, b"", b"", -1, b""]`;
`topic_in_replay=False` leaves the topic frame out of both, as older peers do)."""

from __future__ import annotations

import asyncio
import contextlib

import msgpack  # type: ignore[import-untyped]
import zmq
import zmq.asyncio

END_OF_REPLAY = (-1).to_bytes(8, "big", signed=True)


class KvPublisher:
    """Numbered batches on 127.0.0.1; `publish(..., drop=True)` buffers without sending (a
    gap the subscriber must replay). Fixed ports let a restarted publisher take the old ones."""

    def __init__(
        self,
        topic: bytes = b"kv-events",
        port: int = 0,
        replay_port: int = 0,
        *,
        topic_in_replay: bool = True,
    ) -> None:
        self.ctx = zmq.asyncio.Context()
        self.topic = topic
        self.topic_in_replay = topic_in_replay
        self.pub = self.ctx.socket(zmq.PUB)
        self.router = self.ctx.socket(zmq.ROUTER)
        self.port = _bind(self.pub, port)
        self.replay_port = _bind(self.router, replay_port)
        self.buffer: list[tuple[int, bytes]] = []
        self.next_seq = 0
        self.replay_requests: list[int] = []
        self._replayer = asyncio.get_running_loop().create_task(self._serve_replay())

    @property
    def endpoint(self) -> str:
        return f"tcp://127.0.0.1:{self.port}"

    @property
    def replay_endpoint(self) -> str:
        return f"tcp://127.0.0.1:{self.replay_port}"

    async def publish(self, events: list[object], drop: bool = False) -> int:
        seq, self.next_seq = self.next_seq, self.next_seq + 1
        payload = msgpack.packb([float(seq), events, 0], use_bin_type=True)
        self.buffer.append((seq, payload))
        if not drop:
            await self.send_raw([self.topic, seq.to_bytes(8, "big"), payload])
        return seq

    async def resend_last(self) -> None:
        """The last batch again (same number): to wait out ZMQ's slow-joiner window."""
        seq, payload = self.buffer[-1]
        await self.send_raw([self.topic, seq.to_bytes(8, "big"), payload])

    async def send_raw(self, frames: list[bytes]) -> None:
        await self.pub.send_multipart(frames)

    async def close(self) -> None:
        self._replayer.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._replayer
        self.ctx.destroy(linger=0)

    async def _serve_replay(self) -> None:
        while True:
            frames = await self.router.recv_multipart()
            if len(frames) != 3:
                continue  # vLLM logs and ignores these
            client, _, start_bytes = frames
            start = int.from_bytes(start_bytes, "big")
            self.replay_requests.append(start)
            head = [client, b"", self.topic] if self.topic_in_replay else [client, b""]
            for seq, payload in self.buffer:
                if seq >= start:
                    await self.router.send_multipart([*head, seq.to_bytes(8, "big"), payload])
            end = [client, b"", b""] if self.topic_in_replay else [client, b""]
            await self.router.send_multipart([*end, END_OF_REPLAY, b""])


def _bind(socket: zmq.asyncio.Socket, port: int) -> int:
    if port:
        socket.bind(f"tcp://127.0.0.1:{port}")
        return port
    return socket.bind_to_random_port("tcp://127.0.0.1")
