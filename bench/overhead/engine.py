"""A minimal, near-zero-cost OpenAI-shaped engine for the overhead benchmark.

`kvgate emulate` runs the engine model behind uvicorn and costs about as much CPU per request
as a proxy does, so on two shared cores it, not the proxy under test, would saturate first.
This stub answers from canned bytes on a bare asyncio protocol (uvloop): chat and text
completions, streaming (four SSE events, one write each, chunked) or not, `/v1/models`,
`/health`, a vLLM-named `/metrics`, and `/get_load`. Whatever else a peer router probes
gets 404 (vLLM answers those the same way), except vLLM-router's per-request
`/v1/completions/render`, which gets 403 so that router takes its cheapest path.

Run `python -m bench.overhead.engine --replicas 2`; it prints `replica N: URL` per
replica and serves until SIGINT/SIGTERM. HTTP/1.1 keep-alive only; no pipelining beyond
answering complete requests in order.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
import time
from typing import cast

import orjson

_MAX_HEAD = 64 * 1024


def _response(status: str, body: bytes, content_type: bytes = b"application/json") -> bytes:
    return (
        b"HTTP/1.1 "
        + status.encode()
        + b"\r\ncontent-type: "
        + content_type
        + b"\r\ncontent-length: "
        + str(len(body)).encode()
        + b"\r\n\r\n"
        + body
    )


def _chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


class CannedAnswers:
    """The pre-built response bytes for one served model."""

    def __init__(self, model: str) -> None:
        created = int(time.time())
        completion = {
            "id": "chatcmpl-bench",
            "object": "chat.completion",
            "created": created,
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": "ok ok ok"},
                    "finish_reason": "length",
                }
            ],
            "usage": {"prompt_tokens": 16, "completion_tokens": 3, "total_tokens": 19},
        }
        self.chat = _response("200 OK", orjson.dumps(completion))
        text = {
            **completion,
            "object": "text_completion",
            "choices": [{"index": 0, "text": "ok ok ok", "finish_reason": "length"}],
        }
        self.text = _response("200 OK", orjson.dumps(text))
        self.stream_head = (
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            b"transfer-encoding: chunked\r\n\r\n"
        )
        events = []
        for token in ("ok", " ok", " ok"):
            delta = {
                "id": "chatcmpl-bench",
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "choices": [{"index": 0, "delta": {"content": token}, "finish_reason": None}],
            }
            events.append(_chunk(b"data: " + orjson.dumps(delta) + b"\n\n"))
        events.append(_chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
        self.stream_events = events
        models = {
            "object": "list",
            "data": [
                {
                    "id": model,
                    "object": "model",
                    "created": created,
                    "owned_by": "bench",
                    "max_model_len": 4096,
                }
            ],
        }
        self.models = _response("200 OK", orjson.dumps(models))
        self.health = _response("200 OK", b"")
        self.load = _response("200 OK", b'{"load": 0}')
        metrics = (
            f'vllm:num_requests_running{{model_name="{model}"}} 0.0\n'
            f'vllm:num_requests_waiting{{model_name="{model}"}} 0.0\n'
            f'vllm:kv_cache_usage_perc{{model_name="{model}"}} 0.0\n'
        ).encode()
        self.metrics = _response("200 OK", metrics, b"text/plain; version=0.0.4")
        self.not_found = _response("404 Not Found", b'{"detail":"Not Found"}')
        self.forbidden = _response("403 Forbidden", b'{"detail":"Forbidden"}')


class StubProtocol(asyncio.Protocol):
    """One keep-alive HTTP/1.1 connection: parse complete requests, answer from `CannedAnswers`."""

    def __init__(self, answers: CannedAnswers) -> None:
        self._answers = answers
        self._buf = b""
        self._transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it.
        self._transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        self._buf += data
        while True:
            end = self._buf.find(b"\r\n\r\n")
            if end < 0:
                if len(self._buf) > _MAX_HEAD and self._transport is not None:
                    self._transport.close()
                return
            head = self._buf[:end]
            length = _content_length(head)
            total = end + 4 + length
            if len(self._buf) < total:
                return
            body = self._buf[end + 4 : total]
            self._buf = self._buf[total:]
            self._answer(head, body)

    def _answer(self, head: bytes, body: bytes) -> None:
        transport = self._transport
        if transport is None:
            return
        line = head.split(b"\r\n", 1)[0].split(b" ")
        method, path = line[0], line[1].split(b"?", 1)[0] if len(line) > 1 else b""
        a = self._answers
        if method == b"POST" and path in (b"/v1/chat/completions", b"/v1/completions"):
            if _wants_stream(body):
                transport.write(a.stream_head)
                for event in a.stream_events:
                    transport.write(event)
            else:
                transport.write(a.chat if path == b"/v1/chat/completions" else a.text)
        else:
            routes = {
                b"/v1/models": a.models,
                b"/health": a.health,
                b"/metrics": a.metrics,
                b"/get_load": a.load,
                b"/v1/completions/render": a.forbidden,
            }
            transport.write(routes.get(path, a.not_found))


def _content_length(head: bytes) -> int:
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value.strip() or b"0")
    return 0


def _wants_stream(body: bytes) -> bool:
    # A substring test is enough for the benchmark's own bodies and every router's rewrite.
    return b'"stream":true' in body or b'"stream": true' in body


async def serve(replicas: int, host: str, model: str) -> None:
    loop = asyncio.get_running_loop()
    answers = CannedAnswers(model)
    servers = []
    for i in range(replicas):
        server = await loop.create_server(lambda: StubProtocol(answers), host, 0, backlog=1024)
        servers.append(server)
        port = server.sockets[0].getsockname()[1]
        print(f"replica {i}: http://{host}:{port}", flush=True)
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    for server in servers:
        server.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--replicas", type=int, default=2)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--model", default="bench")
    args = p.parse_args(argv)
    import uvloop

    uvloop.run(serve(args.replicas, args.host, args.model))
    return 0


if __name__ == "__main__":
    sys.exit(main())
