"""Large bodies: the yielding decoder accepts what orjson accepts, and parsing one in
`BodyParser` leaves the event loop running."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import orjson
import pytest

from gateway import large_body
from gateway.errors import BadRequestError
from gateway.inference_request import loads_body, parse_inference_body
from gateway.large_body import BodyParser, loads_yielding

# Each is decoded by orjson and by the yielding decoder: the same value, or both refuse it.
BODIES = [
    b'{"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": true}',
    b' \t\r\n{"a": [1, -0, 2.5, -1e-3, 1E5, 0.1e+2, true, false, null, "", {}]} \n',
    b'{"s": "\\u00e9\\ud83d\\ude00\\n\\t\\"\\\\\\/\\b\\f\\r", "\xc3\xa9": "\xf0\x9f\x98\x80"}',
    b'{"big": 123456789012345678901234567890, "u64": 18446744073709551615}',
    b'{"i64": -9223372036854775808}',
    b'{"neg": -9223372036854775809, "dup": 1, "dup": 2, "nul": "\\u0000"}',
    b'[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[{"deep": [[]]}]]]]]]]]]]]]]]]]]]]]]]]]]]]]]',
    b"[1e308, -1.7976931348623157e308, 5e-324, 1e-400]",
    b'"a string"',
    b"12",
    # refused by both
    b"NaN",
    b"[Infinity]",
    b"[-Infinity]",
    b"[1e999]",
    b'["\\ud800"]',
    b'["\\udc00x"]',
    b'{"\\ud800": 1}',
    b"\xef\xbb\xbf{}",
    b'{"a": "\xff"}',
    b'{"a": "\x01"}',
    b'{"a": 1,}',
    b"[1, 2] x",
    b"[01]",
    b"[.5]",
    b"[+1]",
    b"{'a': 1}",
    b"",
    b"   ",
    b"[" * 2000 + b"]" * 2000,
]


def _outcome(loads: Any, body: bytes) -> tuple[str, Any]:
    try:
        return "ok", loads_body(body, loads)
    except BadRequestError as exc:
        assert exc.code == "invalid_json"
        return "refused", None


@pytest.mark.parametrize("body", BODIES)
def test_the_yielding_decoder_agrees_with_orjson(body: bytes) -> None:
    assert _outcome(loads_yielding, body) == _outcome(orjson.loads, body)


def test_integers_beyond_64_bits_become_floats_as_with_orjson() -> None:
    body = b"[123456789012345678901234567890, 18446744073709551616]"
    assert loads_yielding(body) == orjson.loads(body)
    assert all(isinstance(v, float) for v in loads_yielding(body))


async def test_small_bodies_are_parsed_inline(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_thread(*args: Any) -> Any:
        raise AssertionError("a small body went to a thread")

    monkeypatch.setattr(large_body.asyncio, "to_thread", no_thread)
    body = orjson.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]})
    assert await BodyParser().parse("chat", body) == parse_inference_body("chat", body)


async def test_a_large_body_parses_as_a_small_one_does() -> None:
    body = orjson.dumps({"model": "m", "prompt": "x" * 2048, "user": "u", "stream": True})
    assert await BodyParser(off_loop_bytes=1024).parse("completions", body) == (
        parse_inference_body("completions", body)
    )
    with pytest.raises(BadRequestError) as info:
        await BodyParser(off_loop_bytes=1024).parse("chat", b"[" + b"1," * 2048 + b"]")
    assert info.value.code == "invalid_json"


async def test_the_loop_keeps_running_while_a_16_mib_body_of_tiny_messages_parses(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Not a timing test: the loop must make progress *while* the worker thread decodes.
    orjson in a thread (or inline) holds the GIL for the whole decode: no tick falls in it."""
    window: list[float] = []

    def timed(body: bytes) -> Any:
        window.append(time.perf_counter())
        try:
            return loads_yielding(body)
        finally:
            window.append(time.perf_counter())

    monkeypatch.setattr(large_body, "loads_yielding", timed)
    messages = [{"role": "user", "content": ""}] * ((16 * 1024 * 1024 - 65536) // 30)
    body = orjson.dumps({"model": "m", "messages": messages})
    assert len(body) > 15 * 1024 * 1024
    ticks: list[float] = []
    parsing = asyncio.create_task(BodyParser().parse("chat", body))
    while not parsing.done():
        await asyncio.sleep(0.001)
        ticks.append(time.perf_counter())
    req = await parsing
    assert len(req.prompt) == len(messages)
    start, end = window
    during = [t for t in ticks if start < t < end]
    assert len(during) >= 10, f"{len(during)} ticks in a {end - start:.2f} s parse"


async def test_large_bodies_are_parsed_one_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    running, most = 0, 0

    def counting(body: bytes) -> Any:
        nonlocal running, most
        running += 1
        most = max(most, running)
        time.sleep(0.02)
        running -= 1
        return loads_yielding(body)

    monkeypatch.setattr(large_body, "loads_yielding", counting)
    parser = BodyParser(off_loop_bytes=16)
    body = orjson.dumps({"model": "m", "prompt": "a long enough prompt"})
    results = await asyncio.gather(*(parser.parse("completions", body) for _ in range(4)))
    assert {r.prompt for r in results} == {"a long enough prompt"}
    assert most == 1
