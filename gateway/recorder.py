"""Recording live traffic as a kvgate trace (`kvgate serve --record FILE`, `server.record_path`).

The format (a header line, then one JSON line per completed request, never prompt text) is
specified in `routing.traces.recorded`, which also loads it. `open()` runs at start-up, so a bad
path stops the gateway at once. Per completed request the app calls `record()`: it hashes
the prompt in fixed blocks and appends one encoded line to a buffer in memory, with no I/O
on the request path. `run()`, a task in the app's lifespan task group, writes the buffer out
every `flush_interval_s` on one worker thread; at shutdown, once that task has ended,
`close()` writes the rest. A write error stops the recording (it may have left half a line,
which the loader ignores only at the end of the file): it is logged once, and later lines
are dropped, as are lines that would grow the buffer past `max_buffered_bytes`.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import BinaryIO

from gateway.inference_request import InferenceRequest
from gateway.prompt_bytes import prompt_bytes
from routing.config.schema import GatewayConfig
from routing.traces.recorded import encode_header, encode_request
from routing.traces.request import TraceRequest
from scoring.state.prefix_feed import DEFAULT_BLOCK_TOKENS
from scoring.state.prefix_hash import hash_fixed_blocks, prefix_seed

log = logging.getLogger(__name__)

RECORDED_APIS = frozenset({"chat", "completions", "responses"})  # generation, not embeddings


class TraceRecorder:
    """Appends one trace line per completed inference request to a file, in the background."""

    def __init__(
        self,
        path: str | Path,
        *,
        block_tokens: int,
        chars_per_token: float,
        clock: Callable[[], float],
        flush_interval_s: float = 1.0,
        max_buffered_bytes: int = 64 * 1024 * 1024,
        key: int | None = None,
    ) -> None:
        self.path = Path(path)
        self._block_tokens = block_tokens
        self._chars_per_token = chars_per_token
        self._block_chars = max(1, round(block_tokens * chars_per_token))
        self._clock = clock
        self._interval = flush_interval_s
        self._max_bytes = max_buffered_bytes
        # Keys the hash chain so that recorded ids cannot be checked against guessed prompts.
        self._key = secrets.randbits(64) if key is None else key
        self._file: BinaryIO | None = None
        self._t0 = 0.0
        self._lines: list[bytes] = []
        self._buffered = 0
        self._dropped = 0  # lines not buffered (event loop only)
        self._failed_lines = 0  # lines lost to a write error (writer thread only)
        self._broken = False  # set by the writer thread on a write error

    def open(self) -> None:
        """Open the file for appending and write a header; raises OSError if it can't."""
        self._file = self.path.open("ab")
        self._t0 = self._clock()
        header = encode_header(datetime.now(UTC), self._block_tokens, self._chars_per_token)
        self._file.write(header)
        self._file.flush()

    def record(
        self,
        req: InferenceRequest,
        *,
        arrival: float,
        session: str | None,
        output_tokens: int | None,
        ttft_s: float | None = None,
    ) -> None:
        """Buffer the line of one completed request (`arrival` on the recorder's clock)."""
        if self._file is None or req.api not in RECORDED_APIS:
            return
        if self._broken:
            self._dropped += 1
            return
        # After the response, on the loop: about 1 µs a block, a few ms for 128k tokens.
        data = prompt_bytes(req.api, req.prompt, req.instructions)
        seed = prefix_seed(req.model, req.cache_salt) ^ self._key
        line = encode_request(
            TraceRequest(
                arrival_s=max(0.0, arrival - self._t0),
                input_tokens=int(len(data) / self._chars_per_token),
                output_tokens=output_tokens or 0,
                hash_ids=hash_fixed_blocks(data, seed, self._block_chars),
                block_tokens=self._block_tokens,
                model=req.model,
                session=session,
                ttft_s=ttft_s,
            )
        )
        if self._buffered + len(line) > self._max_bytes:
            if not self._dropped:
                log.error("trace recorder falling behind %s: dropping lines", self.path)
            self._dropped += 1
            return
        self._lines.append(line)
        self._buffered += len(line)

    async def run(self) -> None:
        """Flush every `flush_interval_s` until cancelled (a write in flight completes)."""
        loop = asyncio.get_running_loop()
        with ThreadPoolExecutor(1, thread_name_prefix="kvgate-recorder") as writer:
            while True:
                await asyncio.sleep(self._interval)
                if self._lines:
                    await loop.run_in_executor(writer, self._write, self._take())

    def close(self) -> None:
        """At shutdown, after `run()` has ended: write what is left, close the file."""
        self._write(self._take())
        file, self._file = self._file, None
        if file is not None:
            try:
                file.close()
            except OSError as exc:
                log.error("cannot close the trace file %s: %s", self.path, exc)
        lost = self._dropped + self._failed_lines
        if lost:
            log.warning("trace recorder dropped %d of its lines to %s", lost, self.path)

    def _take(self) -> list[bytes]:
        lines, self._lines, self._buffered = self._lines, [], 0
        return lines

    def _write(self, lines: list[bytes]) -> None:
        if not lines or self._file is None:
            return
        if self._broken:
            self._failed_lines += len(lines)
            return
        try:
            self._file.write(b"".join(lines))
            self._file.flush()
        except OSError as exc:
            log.error("cannot write the trace to %s, recording stopped: %s", self.path, exc)
            self._broken = True
            self._failed_lines += len(lines)


def recorder_for(config: GatewayConfig, clock: Callable[[], float]) -> TraceRecorder | None:
    """The recorder `server.record_path` asks for, or None."""
    if config.server.record_path is None:
        return None
    prefix = config.routing.prefix
    return TraceRecorder(
        config.server.record_path,
        block_tokens=prefix.block_tokens or DEFAULT_BLOCK_TOKENS,
        chars_per_token=prefix.chars_per_token,
        clock=clock,
    )
