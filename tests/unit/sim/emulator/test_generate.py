"""The emulator's SGLang `/generate` and utility endpoints, the ASGI app called directly.

The replica's engine loop runs as a task; no socket is opened.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest

from sim.emulator.app import EmulatorApp
from sim.emulator.engines import Engine
from sim.emulator.lora import LoraSettings
from sim.emulator.replica import Replica
from sim.engine.profiles import get_profile
from sim.engine.tokenizer import BuiltinTokenizer
from sim.workloads import synth_text
from tests.support.asgi_types import Message

MODEL = "emu"


async def _app(engine: Engine) -> AsyncIterator[EmulatorApp]:
    lora = LoraSettings(("sql-lora",), max_loras=1, load_s=0.0)
    replica = Replica(get_profile("demo"), MODEL, speedup=1000.0, lora=lora, engine=engine)
    loop_task = asyncio.create_task(replica.run())
    yield EmulatorApp(replica, BuiltinTokenizer())
    loop_task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await loop_task


@pytest.fixture
async def sglang() -> AsyncIterator[EmulatorApp]:
    async for app in _app("sglang"):
        yield app


@pytest.fixture
async def vllm() -> AsyncIterator[EmulatorApp]:
    async for app in _app("vllm"):
        yield app


async def _call(app: EmulatorApp, path: str, body: Any) -> tuple[int, bytes]:
    pending = [{"type": "http.request", "body": orjson.dumps(body)}]
    sent: list[Message] = []

    async def receive() -> Message:
        if pending:
            return pending.pop()
        await asyncio.Event().wait()  # the client never hangs up
        raise AssertionError

    async def send(message: Message) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "POST", "path": path, "headers": []}
    await app(scope, receive, send)
    return sent[0]["status"], b"".join(m.get("body", b"") for m in sent[1:])


def _events(body: bytes) -> list[Any]:
    chunks = body.decode().split("\n\n")
    assert chunks[-2:] == ["data: [DONE]", ""]
    return [orjson.loads(c.removeprefix("data: ")) for c in chunks[:-2]]


async def test_text_then_ids_of_the_same_prompt_hit_the_cache(sglang: EmulatorApp) -> None:
    text = synth_text(random.Random(1), 200)
    status, body = await _call(sglang, "/generate", {"text": text, "rid": "a"})
    assert status == 200
    first = orjson.loads(body)
    meta = first["meta_info"]
    assert (meta["id"], meta["completion_tokens"], meta["cached_tokens"]) == ("a", 128, 0)
    assert len(first["output_ids"]) == 128 and first["text"]
    ids = BuiltinTokenizer().encode(text)
    assert meta["prompt_tokens"] == len(ids)
    _, body = await _call(
        sglang, "/generate", {"input_ids": ids, "sampling_params": {"max_new_tokens": 2}}
    )
    again = orjson.loads(body)["meta_info"]
    assert again["cached_tokens"] >= len(ids) - 16  # every full block of the prompt
    assert again["finish_reason"] == {"type": "length", "length": 2}


async def test_stream_is_cumulative_and_ends_with_done(sglang: EmulatorApp) -> None:
    body = {"text": "one two three", "stream": True, "sampling_params": {"max_new_tokens": 3}}
    status, raw = await _call(sglang, "/generate", body)
    events = _events(raw)
    assert status == 200 and len(events) == 3
    assert [len(e["output_ids"]) for e in events] == [1, 2, 3]
    assert (
        events[2]["text"].startswith(events[1]["text"]) and events[2]["text"] != events[1]["text"]
    )
    assert [e["meta_info"]["finish_reason"] for e in events[:2]] == [None, None]
    assert "e2e_latency" in events[2]["meta_info"] and "index" not in events[2]


async def test_batches_answer_lists_and_tag_streamed_events(sglang: EmulatorApp) -> None:
    params = {"max_new_tokens": 2}
    _, body = await _call(sglang, "/generate", {"text": ["a b", "c d"], "sampling_params": params})
    answers = orjson.loads(body)
    assert [len(a["output_ids"]) for a in answers] == [2, 2]
    streamed = {"input_ids": [[1, 2], [3, 4]], "stream": True, "sampling_params": params}
    _, raw = await _call(sglang, "/generate", streamed)
    events = _events(raw)
    assert sorted(e["index"] for e in events) == [0, 0, 1, 1]


async def test_lora_path_and_refusals(sglang: EmulatorApp) -> None:
    body = {"text": "x y", "lora_path": "sql-lora", "sampling_params": {"max_new_tokens": 1}}
    assert (await _call(sglang, "/generate", body))[0] == 200
    status, raw = await _call(sglang, "/generate", {**body, "lora_path": "nope"})
    assert status == 400 and list(orjson.loads(raw)) == ["error"]
    long = {"input_ids": [1] * 9000}
    status, raw = await _call(sglang, "/generate", long)
    assert orjson.loads(raw)["error"]["message"].startswith("The input (9000 tokens) is longer")


async def test_utility_endpoints_per_engine(sglang: EmulatorApp, vllm: EmulatorApp) -> None:
    _, raw = await _call(sglang, "/tokenize", {"prompt": "hello there"})
    tokens = orjson.loads(raw)["tokens"]
    _, raw = await _call(vllm, "/generate", {"text": "x"})
    assert orjson.loads(raw) == {"detail": "Not Found"}  # vLLM has no /generate
    out = await _call(sglang, "/generate", {"text": "x", "sampling_params": {"max_new_tokens": 1}})
    produced = orjson.loads(out[1])["output_ids"]
    assert orjson.loads((await _call(sglang, "/detokenize", {"tokens": produced}))[1]).keys() == {
        "text"
    }
    assert orjson.loads((await _call(vllm, "/detokenize", {"tokens": produced}))[1]).keys() == {
        "prompt"
    }
    status, raw = await _call(vllm, "/detokenize", {"tokens": [*tokens[:1], 31999]})
    assert status == 400
    _, raw = await _call(vllm, "/pooling", {"model": MODEL, "input": ["a", "b"]})
    pooled = orjson.loads(raw)
    assert [d["object"] for d in pooled["data"]] == ["pooling", "pooling"]
    _, raw = await _call(vllm, "/classify", {"model": MODEL, "input": "a"})
    [classified] = orjson.loads(raw)["data"]
    assert abs(sum(classified["probs"]) - 1) < 1e-9 and classified["num_classes"] == 2
    assert (await _call(sglang, "/pooling", {"input": "a"}))[0] == 404
    _, raw = await _call(sglang, "/v1/rerank", {"query": "a", "documents": ["a", "b"]})
    assert [r["index"] for r in orjson.loads(raw)] == [0, 1]
    status, raw = await _call(sglang, "/v1/score", {"query": "a", "items": ["b"]})
    assert status == 200 and orjson.loads(raw)["object"] == "scoring"
