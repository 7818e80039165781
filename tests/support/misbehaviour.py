"""How a `RawEngine` answers POSTs: well, or in one of the ways real engines break.

Each behaviour answers a chat request (streaming when the body asks for it) and returns
whether the connection may be reused. Also the odd ``/metrics`` pages that once stopped
the gateway's health checks.
"""

from __future__ import annotations

import asyncio

import orjson

from tests.support import vllm_payloads as shapes
from tests.support.raw_engine import (
    Behaviour,
    RawRequest,
    chunk,
    json_response,
    response_head,
)

_SSE = "text/event-stream; charset=utf-8"
UNSOLICITED = "UNSOLICITED-SECOND-RESPONSE"


def _wants_stream(req: RawRequest) -> bool:
    try:
        body = orjson.loads(req.body)
    except orjson.JSONDecodeError:
        return False
    return isinstance(body, dict) and bool(body.get("stream"))


def _event(rid: str, text: str, finish: str | None = None) -> bytes:
    payload = shapes.chat_chunk(rid, "m1", {"content": text}, finish)
    return b"data: " + orjson.dumps(payload) + b"\n\n"


def _reply(text: str) -> bytes:
    usage = shapes.usage(3, 1)
    return json_response(200, shapes.chat_response("chatcmpl-raw", "m1", text, "stop", usage))


def well(tokens: int = 3, token_delay: float = 0.0, ttft: float = 0.0) -> Behaviour:
    """A correct engine: JSON or an SSE stream of ``tokens`` chunks."""

    async def answer(req: RawRequest, _r: asyncio.StreamReader, w: asyncio.StreamWriter) -> bool:
        await asyncio.sleep(ttft)
        if not _wants_stream(req):
            w.write(_reply("ok"))
            await w.drain()
            return True
        w.write(response_head(200, _SSE))
        for i in range(tokens):
            if i:
                await asyncio.sleep(token_delay)
            finish = "stop" if i == tokens - 1 else None
            w.write(chunk(_event("chatcmpl-raw", f"t{i} ", finish)))
            await w.drain()
        w.write(chunk(b"data: [DONE]\n\n") + chunk(b""))
        await w.drain()
        return True

    return answer


async def hang(_req: RawRequest, reader: asyncio.StreamReader, _w: asyncio.StreamWriter) -> bool:
    """Accepts the request and never answers; returns when the client hangs up."""
    await reader.read()
    return False


async def garbage_sse(req: RawRequest, _r: asyncio.StreamReader, w: asyncio.StreamWriter) -> bool:
    """A 200 event stream of bytes no client can parse, then a proper end."""
    w.write(response_head(200, _SSE))
    for junk in (
        b"\xff\xfe\x00binary\x00\n\n",
        b"data: {not json\n\n",
        b"event: ???\nid: \x01\n\n",
        b"data: " + b"{" * 5000 + b"\n\n",
        b"\n\n\n\r\r\n",
        b"data: [DONE]\n\n",
    ):
        w.write(chunk(junk))
    w.write(chunk(b""))
    await w.drain()
    return True


async def die_mid_event(
    _req: RawRequest, _r: asyncio.StreamReader, w: asyncio.StreamWriter
) -> bool:
    """Two whole events, then half of a third, then the connection is reset."""
    w.write(response_head(200, _SSE))
    event = _event("chatcmpl-raw", "t2 ")
    w.write(chunk(_event("chatcmpl-raw", "t0 ")) + chunk(_event("chatcmpl-raw", "t1 ")))
    w.write(chunk(event[: len(event) // 2]))
    await w.drain()
    await asyncio.sleep(0.2)  # the half event reaches the gateway before the reset
    w.transport.abort()
    return False


async def second_response(
    _req: RawRequest, _r: asyncio.StreamReader, w: asyncio.StreamWriter
) -> bool:
    """A complete JSON answer followed at once by a second, unsolicited one."""
    w.write(_reply("first") + _reply(UNSOLICITED))
    await w.drain()
    return True


async def close_on_reuse(
    req: RawRequest, _r: asyncio.StreamReader, w: asyncio.StreamWriter
) -> bool:
    """Answers the first request of a connection; a later one is read, then the connection
    closes without a byte of answer (as an engine whose keep-alive timer just fired)."""
    if req.index > 0:
        w.transport.abort()
        return False
    w.write(_reply("fresh"))
    await w.drain()
    return True


def huge_values_page() -> bytes:
    """Two series of 1e308 (their sum overflows) and a 400-digit integer label."""
    digits = "9" * 400
    return (
        "# TYPE vllm:num_requests_running gauge\n"
        'vllm:num_requests_running{engine="0",model_name="m1"} 1e308\n'
        'vllm:num_requests_running{engine="1",model_name="m1"} 1e308\n'
        "# TYPE vllm:num_requests_waiting gauge\n"
        'vllm:num_requests_waiting{engine="0",model_name="m1"} 1e308\n'
        'vllm:num_requests_waiting{engine="1",model_name="m1"} 1e308\n'
        'vllm:kv_cache_usage_perc{engine="0",model_name="m1"} 0.5\n'
        "# TYPE vllm:cache_config_info gauge\n"
        f'vllm:cache_config_info{{block_size="{digits}",num_gpu_blocks="{digits}"}} 1.0\n'
    ).encode()


def absurd_block_size_page() -> bytes:
    """A plausible page whose engine claims a block of 10**12 tokens and 0 blocks."""
    base = shapes.metrics_text(("m1",), 0, 0, 0.1)
    info = 'vllm:cache_config_info{block_size="1000000000000",num_gpu_blocks="0"} 1.0\n'
    return (base + "# TYPE vllm:cache_config_info gauge\n" + info).encode()


def huge_page(megabytes: int = 50) -> bytes:
    """A valid page padded with comment lines to ``megabytes`` MB."""
    base = shapes.metrics_text(("m1",), 0, 0, 0.1).encode()
    pad = b"# " + b"x" * 1021 + b"\n"
    return base + pad * (megabytes * 1024)


async def slam(_req: RawRequest, _r: asyncio.StreamReader, w: asyncio.StreamWriter) -> bool:
    """Reads the request and resets the connection without a byte of answer."""
    w.transport.abort()
    return False
