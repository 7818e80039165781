from __future__ import annotations

import orjson

from gateway.output_tokens import OutputTokenCounter
from gateway.usage import TAIL_BYTES, UsageTap


def _count(chunks: list[bytes], sse: bool) -> int | None:
    counter = OutputTokenCounter(sse)
    tap = UsageTap()
    for chunk in chunks:
        counter.feed(chunk)
        tap.feed(chunk)
    return counter.output_tokens(tap.usage())


def _split(data: bytes, size: int) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)]


def _event(obj: object) -> bytes:
    return b"data: " + orjson.dumps(obj) + b"\n\n"


def _chat_chunk(delta: dict[str, object], finish: str | None = None) -> bytes:
    return _event(
        {
            "object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            "usage": None,
        }
    )


USAGE = {
    "prompt_tokens": 12,
    "completion_tokens": 7,
    "total_tokens": 19,
    "prompt_tokens_details": {"cached_tokens": 0},
}


def test_json_body_usage_in_pieces() -> None:
    body = orjson.dumps(
        {"choices": [{"message": {"content": "hi"}}], "usage": USAGE, "kv_transfer_params": None}
    )
    assert _count(_split(body, 5), sse=False) == 7


def test_json_body_longer_than_the_tail() -> None:
    text = "x" * (5 * TAIL_BYTES)
    body = orjson.dumps({"choices": [{"message": {"content": text}}], "usage": USAGE})
    assert _count(_split(body, 1000), sse=False) == 7


def test_responses_body_output_tokens() -> None:
    usage = {
        "input_tokens": 3,
        "output_tokens": 11,
        "output_tokens_details": {"reasoning_tokens": 0},
    }
    body = orjson.dumps({"object": "response", "output": [], "usage": usage})
    assert _count([body], sse=False) == 11


def test_text_that_looks_like_usage_is_not_usage() -> None:
    body = orjson.dumps(
        {"choices": [{"message": {"content": '"usage": {"completion_tokens": 99}'}}]}
    )
    assert _count([body], sse=False) is None


def test_json_without_usage_is_unknown() -> None:
    assert _count([b'{"choices": []}'], sse=False) is None


def test_stream_usage_chunk_wins() -> None:
    events = [_chat_chunk({"role": "assistant", "content": ""})]
    events += [_chat_chunk({"content": f"t{i} "}) for i in range(3)]
    events.append(_event({"object": "chat.completion.chunk", "choices": [], "usage": USAGE}))
    events.append(b"data: [DONE]\n\n")
    assert _count(events, sse=True) == 7


def test_stream_without_usage_counts_text_events() -> None:
    events = [_chat_chunk({"role": "assistant", "content": ""})]
    events += [_chat_chunk({"content": "\\n" if i == 0 else f"t{i}"}) for i in range(5)]
    events += [_chat_chunk({}, "stop"), b"data: [DONE]\n\n"]
    assert _count([b"".join(events)], sse=True) == 5  # several events in one chunk too
    completion = [_event({"choices": [{"text": f"t{i}"}]}) for i in range(4)]
    assert _count(completion, sse=True) == 4
