from __future__ import annotations

import itertools
import random
from pathlib import Path

import orjson
import pytest

from gateway.usage import (
    TAIL_BYTES,
    Usage,
    UsageEventFilter,
    UsageTap,
    ask_for_usage,
    parse_last_usage,
)
from sim.emulator import openai_api as emulator
from sim.emulator import sglang_api as sglang

SAMPLES = Path(__file__).resolve().parents[2] / "fixtures" / "vllm-0.32" / "http_samples.txt"


def _sample(title: str) -> bytes:
    """One answer of the vLLM 0.32 capture, as it came over the wire."""
    text = SAMPLES.read_text()
    body = text.split(f"== {title}\n", 1)[1].split("\n== ", 1)[0]
    return body.encode() + b"\n"  # the split took the blank line that ends an SSE stream


VLLM_CHAT_STREAM = _sample("POST /v1/chat/completions stream")
VLLM_COMPLETION_STREAM = _sample("POST /v1/completions stream")


def _events(stream: bytes) -> list[bytes]:
    return [e + b"\n\n" for e in stream.split(b"\n\n") if e.strip()]


def _without_usage_event(stream: bytes) -> bytes:
    return b"".join(e for e in _events(stream) if b'"choices":[],"usage"' not in e)


def _relay(chunks: list[bytes]) -> tuple[bytes, list[bytes]]:
    """What a filter relays of `chunks`, in all and chunk by chunk (with the end's rest)."""
    f = UsageEventFilter()
    out = [f.feed(c) for c in chunks]
    out[-1] += f.finish()
    return b"".join(out), out


def _cuts(data: bytes, positions: list[int]) -> list[bytes]:
    edges = [0, *sorted(positions), len(data)]
    return [data[a:b] for a, b in itertools.pairwise(edges)]


@pytest.mark.parametrize("stream", [VLLM_CHAT_STREAM, VLLM_COMPLETION_STREAM])
def test_vllm_usage_event_is_dropped_wherever_the_chunks_split(stream: bytes) -> None:
    assert stream.count(b'"usage"') == 1 and stream.endswith(b"data: [DONE]\n\n")
    expected = _without_usage_event(stream)
    assert b'"usage"' not in expected and expected.endswith(b"data: [DONE]\n\n")
    for cut in range(1, len(stream)):
        assert _relay(_cuts(stream, [cut]))[0] == expected, cut
    rng = random.Random(7)
    for _ in range(200):
        positions = rng.sample(range(1, len(stream)), rng.randint(2, 40))
        assert _relay(_cuts(stream, positions))[0] == expected


def test_whole_events_are_relayed_at_once() -> None:
    chunks = _events(VLLM_CHAT_STREAM)
    _, out = _relay(chunks)
    usage_at = next(i for i, c in enumerate(chunks) if b'"usage"' in c)
    assert [o for i, o in enumerate(out) if i != usage_at] == [
        c for i, c in enumerate(chunks) if i != usage_at
    ]
    assert out[usage_at] == b""
    # A partial event waits for its end; nothing of it is lost.
    f = UsageEventFilter()
    first = chunks[0]
    assert f.feed(first[:10]) == b""
    assert f.feed(first[10:] + chunks[1][:5]) == first
    assert f.feed(chunks[1][5:]) == chunks[1]


def test_a_stream_without_usage_event_passes_unchanged() -> None:
    stream = _without_usage_event(VLLM_CHAT_STREAM)
    assert _relay(_cuts(stream, [3, 50, 51, 400]))[0] == stream
    f = UsageEventFilter()
    f.feed(stream)
    assert f.usage() is None  # an engine that ignores stream_options: nothing to read
    unfinished = stream[:-3]  # the engine died mid-event: what came is relayed at the end
    assert _relay(_cuts(unfinished, [100]))[0] == unfinished


def test_usage_in_content_events_is_kept() -> None:
    """Continuous usage stats ride on events that carry choices: those are the client's."""
    event = b'data: {"choices":[{"delta":{"content":"x"}}],"usage":{"prompt_tokens":3}}\n\n'
    last = b'data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":1}}\n\n'
    stream = event + event + last + b"data: [DONE]\n\n"
    assert _relay([stream])[0] == event + event + b"data: [DONE]\n\n"


def test_crlf_framed_events() -> None:
    stream = VLLM_COMPLETION_STREAM.replace(b"\n\n", b"\r\n\r\n")
    expected = _without_usage_event(VLLM_COMPLETION_STREAM).replace(b"\n\n", b"\r\n\r\n")
    for cut in range(1, len(stream), 7):
        assert _relay(_cuts(stream, [cut]))[0] == expected


def test_emulator_stream_reads_and_strips_like_vllm() -> None:
    """The emulator frames its stream as vLLM does, and adds the cached tokens."""
    use = emulator.usage(40, 2, 32)
    stream = b"".join(
        [
            emulator.role_chunk("c1", "emu"),
            emulator.stream_chunk("c1", "chat", "emu", " hi", None),
            emulator.stream_chunk("c1", "chat", "emu", " yo", "length"),
            emulator.usage_chunk("c1", "chat", "emu", use),
            emulator.DONE,
        ]
    )
    assert _relay(_cuts(stream, [17, 200]))[0] == _without_usage_event(stream)
    tap = UsageTap()
    assert tap.feed(stream) == stream and tap.finish() == b""
    assert tap.usage() == Usage(prompt_tokens=40, cached_tokens=32, completion_tokens=2)
    f = UsageEventFilter()
    for chunk in _cuts(stream, [17, 200, 201]):
        f.feed(chunk)
    assert f.usage() == Usage(prompt_tokens=40, cached_tokens=32, completion_tokens=2)


def test_tap_reads_vllm_stream_and_bodies() -> None:
    tap = UsageTap()
    for chunk in _cuts(VLLM_CHAT_STREAM, [40, 900]):
        tap.feed(chunk)
    assert tap.usage() == Usage(prompt_tokens=12, cached_tokens=None, completion_tokens=4)
    body = _sample("POST /v1/chat/completions").strip()
    tap = UsageTap()
    tap.feed(body)
    assert tap.usage() == Usage(prompt_tokens=12, cached_tokens=None, completion_tokens=8)


def test_tap_reads_sglang_generate_streams_and_batches() -> None:
    """The emulator's SGLang events: text so far in each, so the last is long; its meta_info
    comes last, inside the tail."""
    events = []
    for n in (1498, 1499, 1500):  # a long answer's last events
        meta = sglang.meta_info("r", 30, n, 16, finished=n == 1500)
        events.append(sglang.event(sglang.output(" word" * n, list(range(n)), meta)))
    stream = b"".join(events) + sglang.DONE
    tap = UsageTap()
    for chunk in _cuts(stream, [5000, 30_000]):
        tap.feed(chunk)
    assert len(events[-1]) > TAIL_BYTES
    assert tap.usage() == Usage(prompt_tokens=30, cached_tokens=16, completion_tokens=1500)
    batch = orjson.dumps(
        [sglang.output("a", [1], sglang.meta_info(f"r{i}", 5, 1, i, finished=True)) for i in (1, 2)]
    )
    tap = UsageTap()
    tap.feed(batch)
    assert tap.usage() == Usage(5, 2, 1)  # the last item's: the director does not grade it


def test_tap_keeps_only_the_tail() -> None:
    text = "x" * (5 * TAIL_BYTES)
    body = orjson.dumps(
        {
            "choices": [{"message": {"content": text}}],
            "usage": {"prompt_tokens": 9, "prompt_tokens_details": {"cached_tokens": 8}},
        }
    )
    tap = UsageTap()
    for i in range(0, len(body), 1000):
        tap.feed(body[i : i + 1000])
    assert tap.usage() == Usage(9, 8, None)
    assert sum(map(len, tap._chunks)) < TAIL_BYTES + 1000


@pytest.mark.parametrize(
    ("tail", "expected"),
    [
        (b'"usage": {"completion_tokens": 3}', Usage(None, None, 3)),
        (b'"usage":{"completion_tokens": 3}, "usage": null', Usage(None, None, 3)),
        (b'"usage": {"completion_tokens": 3} ... "usage": {"completion_tok', Usage(None, None, 3)),
        (b'ens": 3}', None),
        (b'"usage": {"completion_tokens": -1}', None),
        (b'"usage": {"completion_tokens": true}', None),
        (
            b'"usage":{"prompt_tokens":50,"prompt_tokens_details":{"cached_tokens":48}}',
            Usage(50, 48, None),
        ),
        (b'"usage":{"prompt_tokens":50,"prompt_tokens_details":null}', Usage(50, None, None)),
        (
            b'"usage":{"input_tokens":7,"input_tokens_details":{"cached_tokens":0},'
            b'"output_tokens":2}',
            Usage(7, 0, 2),
        ),
        # Text that looks like usage sits in a JSON string, where its quotes are escaped.
        (orjson.dumps({"content": '"usage": {"prompt_tokens": 9}'}), None),
        # SGLang's /generate: meta_info, cached tokens beside the prompt's.
        (
            b'{"text":"a","output_ids":[5],"meta_info":{"id":"r1","finish_reason":'
            b'{"type":"length","length":1},"prompt_tokens":40,"weight_version":"default",'
            b'"total_retractions":0,"completion_tokens":1,"cached_tokens":32,'
            b'"e2e_latency":0.1}}',
            Usage(40, 32, 1),
        ),
        (  # the last event of a stream, after the earlier ones
            b'data: {"meta_info":{"prompt_tokens":4,"completion_tokens":1,"cached_tokens":0}}'
            b'\n\ndata: {"meta_info":{"prompt_tokens":4,"completion_tokens":2,'
            b'"cached_tokens":0}}\n\ndata: [DONE]\n\n',
            Usage(4, 0, 2),
        ),
        (b'"meta_info":{"id":"x","prompt_tokens":4}', Usage(4, None, None)),  # an embedding's
        (orjson.dumps({"text": '"meta_info": {"prompt_tokens": 9}'}), None),
        # A third level of braces is not a usage object: the one before it is read.
        (
            b'"usage":{"prompt_tokens":5} "usage":{"prompt_tokens":6,"a":{"b":{"c":1}}}',
            Usage(5, None, None),
        ),
        (  # two nested objects, side by side
            b'"usage":{"prompt_tokens_details":{"cached_tokens":1},"prompt_tokens":3,'
            b'"completion_tokens_details":{"reasoning_tokens":0},"completion_tokens":2}',
            Usage(3, 1, 2),
        ),
        (b'"usage":{"prompt_tokens":3,"prompt_tokens_details":{"cached_tokens":1', None),
    ],
)
def test_parse_last_usage(tail: bytes, expected: Usage | None) -> None:
    assert parse_last_usage(tail) == expected


def test_ask_for_usage_splices_the_usual_body() -> None:
    body = b'{"model":"m","messages":[],"stream":true}  \n'
    asked = ask_for_usage(body)
    assert asked == b'{"model":"m","messages":[],"stream":true,' + (
        b'"stream_options":{"include_usage":true}}'
    )
    assert orjson.loads(asked) == {**orjson.loads(body), "stream_options": {"include_usage": True}}


@pytest.mark.parametrize(
    ("options", "forwarded"),
    [
        ({"include_usage": True}, None),
        ({"include_usage": False}, {"include_usage": True}),
        ({"continuous_usage_stats": True}, {"continuous_usage_stats": True, "include_usage": True}),
        (None, {"include_usage": True}),
    ],
)
def test_ask_for_usage_respects_the_clients_options(
    options: dict[str, bool] | None, forwarded: dict[str, bool] | None
) -> None:
    body = orjson.dumps({"model": "m", "prompt": "p", "stream": True, "stream_options": options})
    asked = ask_for_usage(body)
    if forwarded is None:
        assert asked is None
    else:
        assert asked is not None
        assert orjson.loads(asked) == {**orjson.loads(body), "stream_options": forwarded}


def test_ask_for_usage_when_a_string_is_stream_options() -> None:
    body = orjson.dumps({"model": "m", "prompt": "stream_options", "stream": True})
    assert b'"stream_options"' in body  # not a key: the body is parsed to tell
    asked = ask_for_usage(body)
    assert asked is not None
    assert orjson.loads(asked) == {**orjson.loads(body), "stream_options": {"include_usage": True}}
