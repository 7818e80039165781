"""Tokenizer-exact prompt ids against the emulator serving a real `tokenizer.json`: the local
tokenizer (with a chat template equal to the emulator's) and the engine tokenizer (asking
its /tokenize, over the gateway's own client and over httpx) give exactly the ids the
emulator reports, and as many as a real request's `usage.prompt_tokens`."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from gateway.inference_request import InferenceRequest, parse_inference_body
from gateway.tokens import PromptTokenizer, build_tokenizers
from gateway.tokens.engine import EngineTokenizer
from gateway.tokens.transport import HttpxPoster
from routing.config.schema import parse_config
from sim.emulator.app import EmulatorApp
from sim.emulator.replica import Replica
from sim.emulator.server import make_tokenizer
from sim.engine.profiles import get_profile
from sim.workloads import synth_text
from tests.support.fixture_types import ServeApp
from tests.support.servers import ServerThread
from tests.support.tokenizer_files import CHATML, write_model_dir

MODEL = "tiny"
rng = random.Random(3)
SYSTEM = synth_text(rng, 120)
CHATS = [
    [{"role": "user", "content": "hi"}],
    [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": synth_text(rng, 300) + "\n\n  tabs\tand ünïcode — ok?"},
        {"role": "assistant", "content": synth_text(rng, 40)},
        {"role": "user", "content": "w12x12 w1999x59 and again"},
    ],
]
PROMPTS = ["once upon a time", SYSTEM + " <|im_start|> " + synth_text(rng, 500)]
CASES = [("chat", c) for c in CHATS] + [("completions", p) for p in PROMPTS]


@pytest.fixture
def model_dir(tmp_path: Path) -> Path:
    return write_model_dir(tmp_path / "model")


@pytest.fixture
def emulator(serve_app: ServeApp, model_dir: Path) -> ServerThread:
    replica = Replica(get_profile("demo"), MODEL, 50.0)
    app = EmulatorApp(replica, make_tokenizer(str(model_dir / "tokenizer.json")))
    return serve_app(app, lifespan="on")


@pytest.fixture
async def tokenizers(
    emulator: ServerThread, model_dir: Path
) -> AsyncIterator[dict[str, PromptTokenizer]]:
    entries = parse_config(
        {
            "tokenizers": [
                {
                    "model": MODEL,
                    "source": "local",
                    "path": str(model_dir),
                    "chat_template": str(CHATML),
                },
                {"model": "*", "source": "engine"},
            ]
        }
    ).tokenizers
    built = build_tokenizers(entries, lambda model: emulator.url)
    local, engine = built.for_model(MODEL), built.for_model("any")
    assert local is not None and engine is not None
    poster = HttpxPoster()
    over_httpx = EngineTokenizer(lambda model: emulator.url, poster)
    yield {"local": local, "engine": engine, "engine-httpx": over_httpx}
    await built.aclose()
    await poster.aclose()


def _request(api: str, prompt: Any) -> InferenceRequest:
    field = "messages" if api == "chat" else "prompt"
    return parse_inference_body(
        api, httpx.Request("POST", "/", json={"model": MODEL, field: prompt}).content
    )


@pytest.mark.parametrize(("api", "prompt"), CASES)
async def test_every_tokenizer_gives_the_engines_ids(
    emulator: ServerThread, tokenizers: dict[str, PromptTokenizer], api: str, prompt: Any
) -> None:
    field = "messages" if api == "chat" else "prompt"
    async with httpx.AsyncClient(base_url=emulator.url, timeout=10) as http:
        answer = await http.post("/tokenize", json={"model": MODEL, field: prompt})
        expected = answer.json()["tokens"]
        assert len(expected) > 0
        for name, tokenizer in tokenizers.items():
            assert await tokenizer.token_ids(_request(api, prompt)) == expected, name
        path = "/v1/chat/completions" if api == "chat" else "/v1/completions"
        done = await http.post(path, json={"model": MODEL, field: prompt, "max_tokens": 1})
        assert done.status_code == 200, done.text
        assert done.json()["usage"]["prompt_tokens"] == len(expected)


async def test_the_engine_tokenizer_asks_once_per_prompt(
    tokenizers: dict[str, PromptTokenizer],
) -> None:
    engine = tokenizers["engine"]
    for _ in range(3):
        for api, prompt in CASES:
            assert await engine.token_ids(_request(api, prompt))
    counters = engine.counters
    assert (counters.misses, counters.hits, counters.errors) == (len(CASES), 2 * len(CASES), 0)


@pytest.mark.parametrize("name", ["engine", "engine-httpx"])
async def test_a_backend_that_is_gone_costs_only_a_counted_none(
    tokenizers: dict[str, PromptTokenizer], emulator: ServerThread, name: str
) -> None:
    emulator.stop()
    engine = tokenizers[name]
    assert await engine.token_ids(_request("chat", [{"role": "user", "content": "x"}])) is None
    assert engine.counters.errors == 1
