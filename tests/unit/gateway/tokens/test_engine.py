"""EngineTokenizer: asks the picked backend's /tokenize, caches answers, counts failures."""

from __future__ import annotations

import json

import httpx
import pytest
import respx

from gateway.inference_request import InferenceRequest
from gateway.tokens.engine import EngineTokenizer
from gateway.tokens.transport import HttpxPoster

BASE = "http://engine.test:8000"
MESSAGES = [{"role": "user", "content": "hello"}]


def _req(api: str, prompt: object, model: str = "m") -> InferenceRequest:
    return InferenceRequest(api, model, False, None, 100, prompt)


def _answer(tokens: list[int]) -> httpx.Response:
    return httpx.Response(200, json={"count": len(tokens), "max_model_len": 4096, "tokens": tokens})


@pytest.fixture
def engine() -> EngineTokenizer:
    return EngineTokenizer(lambda model: BASE, HttpxPoster(), cache_entries=2, timeout_s=0.5)


@respx.mock
async def test_chat_asks_with_the_messages_and_caches_the_answer(engine: EngineTokenizer) -> None:
    route = respx.post(f"{BASE}/tokenize").mock(return_value=_answer([1, 2, 3]))
    assert await engine.token_ids(_req("chat", MESSAGES)) == [1, 2, 3]
    assert json.loads(route.calls[0].request.content) == {"model": "m", "messages": MESSAGES}
    assert await engine.token_ids(_req("chat", [dict(m) for m in MESSAGES])) == [1, 2, 3]
    assert route.call_count == 1
    counters = engine.counters
    assert (counters.hits, counters.misses, counters.errors) == (1, 1, 0)


@respx.mock
async def test_completions_ask_with_the_prompt(engine: EngineTokenizer) -> None:
    route = respx.post(f"{BASE}/tokenize").mock(return_value=_answer([7]))
    assert await engine.token_ids(_req("completions", "hi")) == [7]
    assert json.loads(route.calls[0].request.content) == {"model": "m", "prompt": "hi"}
    assert await engine.token_ids(_req("completions", [4, 5])) == [4, 5]  # no question
    assert route.call_count == 1


@respx.mock
async def test_the_model_and_the_api_are_part_of_the_cache_key(engine: EngineTokenizer) -> None:
    route = respx.post(f"{BASE}/tokenize").mock(return_value=_answer([1]))
    await engine.token_ids(_req("completions", "same"))
    await engine.token_ids(_req("completions", "same", model="other"))
    await engine.token_ids(_req("chat", [{"role": "same", "content": ""}]))
    assert route.call_count == 3


@respx.mock
async def test_the_least_recently_used_answer_is_evicted(engine: EngineTokenizer) -> None:
    route = respx.post(f"{BASE}/tokenize").mock(return_value=_answer([1]))
    for prompt in ("a", "b", "a", "c", "a", "b"):  # capacity 2: b is evicted by c
        await engine.token_ids(_req("completions", prompt))
    assert route.call_count == 4
    assert len(engine) == 2


@pytest.mark.parametrize(
    "mock",
    [
        {"return_value": httpx.Response(500, json={"error": "x"})},
        {"return_value": httpx.Response(200, content=b"not json")},
        {"return_value": httpx.Response(200, json={"tokens": ["a"]})},
        {"side_effect": httpx.ConnectError("refused")},
        {"side_effect": httpx.ReadTimeout("slow")},
    ],
)
@respx.mock
async def test_failures_are_none_counted_and_not_cached(
    engine: EngineTokenizer, mock: dict[str, object]
) -> None:
    route = respx.post(f"{BASE}/tokenize").mock(**mock)
    assert await engine.token_ids(_req("chat", MESSAGES)) is None
    assert await engine.token_ids(_req("chat", MESSAGES)) is None
    assert route.call_count == 2
    assert engine.counters.errors == 2


async def test_no_backend_is_none_and_counted() -> None:
    engine = EngineTokenizer(lambda model: None, HttpxPoster())
    assert await engine.token_ids(_req("chat", MESSAGES)) is None
    assert await engine.token_ids(_req("embeddings", "x")) is None
    assert (engine.counters.no_backend, engine.counters.unsupported) == (1, 1)


@respx.mock
async def test_the_backend_is_picked_per_model() -> None:
    respx.post("http://a.test/tokenize").mock(return_value=_answer([1]))
    respx.post("http://b.test/tokenize").mock(return_value=_answer([2]))
    picked: list[str] = []

    def pick(model: str) -> str:
        picked.append(model)
        return "http://a.test" if model == "ma" else "http://b.test"

    engine = EngineTokenizer(pick, HttpxPoster(), cache_entries=0)
    assert await engine.token_ids(_req("completions", "x", model="ma")) == [1]
    assert await engine.token_ids(_req("completions", "x", model="mb")) == [2]
    assert await engine.token_ids(_req("completions", "x", model="mb")) == [2]  # no cache
    assert picked == ["ma", "mb", "mb"]
