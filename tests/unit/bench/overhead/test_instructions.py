"""The instruction counter: the overhead bench's request, keep-alive framing, what it runs."""

from __future__ import annotations

import asyncio
from pathlib import Path

import orjson

from bench.overhead import instructions
from bench.overhead.instructions import _read_response, _total_ir, request_bytes


def test_request_is_the_overhead_benchs_chat_completion() -> None:
    raw = request_bytes("127.0.0.1:8000", stream=True)
    head, body = raw.split(b"\r\n\r\n", 1)
    assert head.startswith(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:8000\r\n")
    assert f"Content-Length: {len(body)}".encode() in head
    data = orjson.loads(body)
    assert (data["model"], data["max_tokens"], data["stream"]) == ("bench", 3, True)
    assert not orjson.loads(request_bytes("h", stream=False).split(b"\r\n\r\n", 1)[1])["stream"]


def test_responses_are_read_by_length_or_chunks() -> None:
    async def read(data: bytes) -> tuple[int, bytes]:
        reader = asyncio.StreamReader()
        reader.feed_data(data + b"NEXT")
        status = await _read_response(reader)
        return status, await reader.read(4)

    by_length = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"
    chunked = b"HTTP/1.1 503 x\r\ntransfer-encoding: chunked\r\n\r\n2\r\nab\r\n0\r\n\r\n"
    assert asyncio.run(read(by_length)) == (200, b"NEXT")
    assert asyncio.run(read(chunked)) == (503, b"NEXT")


def test_total_is_read_from_the_dump(tmp_path: Path) -> None:
    dump = tmp_path / "callgrind.out.1"
    dump.write_text("events: Ir\nfn=main\n1 5\ntotals: 12345\n")
    assert _total_ir(dump) == 12345


def test_a_floor_is_counted_instead_of_kvgate_when_named(tmp_path: Path) -> None:
    urls = ["http://127.0.0.1:1", "http://127.0.0.1:2"]
    floor = instructions._command(urls, "floor-asgi", 9, tmp_path / "gateway.yaml")
    assert floor[1:4] == ["-m", "bench.overhead.asgi_floor", "--port"]
    assert floor[-4:] == ["--backend", urls[0], "--backend", urls[1]]
    kvgate = instructions._command(urls, "round-robin", 9, tmp_path / "gateway.yaml")
    assert kvgate[1:4] == ["-m", "kvgate.cli", "serve"]
    assert kvgate[kvgate.index("--policy") :][:2] == ["--policy", "round-robin"]
    assert str(tmp_path / "gateway.yaml") in kvgate
