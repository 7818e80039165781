"""The emulator app serves LoRA adapters as vLLM does: listed, served, reported in metrics.

The ASGI app is called directly (no socket); the replica's engine loop runs as a task.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest

from adapters.vllm import VLLM
from health.pool import adapter_parent
from sim.emulator.app import EmulatorApp
from sim.emulator.lora import LoraSettings
from sim.emulator.replica import Replica
from sim.engine.profiles import get_profile
from sim.engine.tokenizer import BuiltinTokenizer
from sim.workloads import synth_text
from tests.support.asgi_types import Message

MODEL = "emu"


@pytest.fixture
async def app() -> AsyncIterator[EmulatorApp]:
    lora = LoraSettings(("sql-lora", "chat-lora"), max_loras=2, load_s=0.0)
    replica = Replica(get_profile("demo"), MODEL, speedup=1000.0, lora=lora)
    loop_task = asyncio.create_task(replica.run())
    yield EmulatorApp(replica, BuiltinTokenizer())
    loop_task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await loop_task


async def _call(app: EmulatorApp, method: str, path: str, body: Any = None) -> tuple[int, bytes]:
    pending = [{"type": "http.request", "body": orjson.dumps(body) if body else b""}]
    sent: list[Message] = []

    async def receive() -> Message:
        if pending:
            return pending.pop()
        await asyncio.Event().wait()  # the client never hangs up
        raise AssertionError

    async def send(message: Message) -> None:
        sent.append(message)

    scope = {"type": "http", "method": method, "path": path, "headers": []}
    await app(scope, receive, send)
    return sent[0]["status"], b"".join(m.get("body", b"") for m in sent[1:])


def _completion(model: str, prompt: str) -> dict[str, Any]:
    return {"model": model, "prompt": prompt, "max_tokens": 2}


async def test_models_list_the_adapters_with_the_model_as_parent(app: EmulatorApp) -> None:
    status, body = await _call(app, "GET", "/v1/models")
    assert status == 200
    cards = orjson.loads(body)["data"]
    assert [(c["id"], c["parent"], c["root"]) for c in cards] == [
        (MODEL, None, MODEL),
        ("sql-lora", MODEL, "sql-lora"),
        ("chat-lora", MODEL, "chat-lora"),
    ]
    assert [adapter_parent(c) for c in cards] == [None, MODEL, MODEL]
    assert cards[0]["max_model_len"] > 0 and cards[1]["max_model_len"] is None


async def test_adapter_requests_are_served_and_unknown_models_are_404(app: EmulatorApp) -> None:
    status, body = await _call(app, "POST", "/v1/completions", _completion("sql-lora", "hi"))
    assert status == 200
    assert orjson.loads(body)["model"] == "sql-lora"
    status, body = await _call(app, "POST", "/v1/completions", _completion("nope", "hi"))
    assert status == 404
    assert orjson.loads(body)["error"]["type"] == "NotFoundError"


async def test_an_adapter_hits_only_its_own_cached_prefix(app: EmulatorApp) -> None:
    prompt = synth_text(random.Random(3), 200)

    async def cached(model: str) -> int:
        status, body = await _call(app, "POST", "/v1/completions", _completion(model, prompt))
        assert status == 200
        details = orjson.loads(body)["usage"]["prompt_tokens_details"]
        return int(details["cached_tokens"])

    assert await cached(MODEL) == 0
    assert await cached("sql-lora") == 0  # the base model's blocks are not the adapter's
    assert await cached("sql-lora") > 0
    assert await cached("chat-lora") == 0


async def test_metrics_report_running_adapters(app: EmulatorApp) -> None:
    replica = app.replica
    await replica.admit("r1", [1, 2, 3], [4] * 1000, "chat-lora")
    status, body = await _call(app, "GET", "/metrics")
    assert status == 200
    metrics = VLLM.parse_metrics(body.decode(), 0.0)
    assert metrics.running_loras == frozenset({"chat-lora"})
    assert metrics.waiting_loras == frozenset()
    assert metrics.max_loras == 2
    replica.abort("r1")
    metrics = VLLM.parse_metrics((await _call(app, "GET", "/metrics"))[1].decode(), 0.0)
    assert metrics.running_loras == frozenset()


async def test_a_request_waiting_for_an_adapter_slot_counts_as_waiting() -> None:
    lora = LoraSettings(("a", "b"), max_loras=1, load_s=0.0)
    replica = Replica(get_profile("demo"), MODEL, speedup=1000.0, lora=lora)
    app = EmulatorApp(replica, BuiltinTokenizer())
    await replica.admit("r1", [1, 2, 3], [4] * 1000, "a")
    waiting = asyncio.create_task(replica.admit("r2", [1, 2, 3], [4] * 1000, "b"))
    for _ in range(5):
        await asyncio.sleep(0)
    text = (await _call(app, "GET", "/metrics"))[1].decode()
    metrics = VLLM.parse_metrics(text, 0.0)
    assert (metrics.running_loras, metrics.waiting_loras) == ({"a"}, {"b"})
    assert metrics.waiting == 2  # r1 is queued in the engine (no loop runs), r2 for a slot
    assert orjson.loads((await _call(app, "GET", "/load"))[1]) == {"server_load": 2}
    replica.abort("r1")
    await waiting
    metrics = VLLM.parse_metrics((await _call(app, "GET", "/metrics"))[1].decode(), 0.0)
    assert (metrics.running_loras, metrics.waiting_loras) == ({"b"}, frozenset())
    replica.abort("r2")
