"""The test doubles themselves: FakeEngine behind a real uvicorn ServerThread."""

from __future__ import annotations

import httpx
import openai
import orjson
import pytest

from tests.support.fake_engine import FakeEngine
from tests.support.fixture_types import StartEngines
from tests.support.servers import ServerThread, dead_url
from tests.support.waiting import async_wait_until, wait_until

CHAT = {"model": "m1", "messages": [{"role": "user", "content": "hello there"}]}


def _start_one(fake_engines: StartEngines, **kwargs: object) -> tuple[FakeEngine, ServerThread]:
    [(engine, server)] = fake_engines(1, **kwargs)
    return engine, server


def _sse_data(lines: list[str]) -> list[str]:
    return [line.removeprefix("data: ") for line in lines if line.startswith("data: ")]


def test_streaming_chat_is_sse_ending_with_done(fake_engines: StartEngines) -> None:
    engine, server = _start_one(fake_engines, tokens=3)
    body = {**CHAT, "stream": True, "stream_options": {"include_usage": True}}
    with (
        httpx.Client(base_url=server.url, timeout=5) as client,
        client.stream(
            "POST", "/v1/chat/completions", json=body, headers={"x-request-id": "r-1"}
        ) as response,
    ):
        lines = list(response.iter_lines())
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    assert response.headers["x-fake-engine"] == "e1"
    assert response.headers["x-request-id"] == "r-1"
    data = _sse_data(lines)
    assert data[-1] == "[DONE]"
    chunks = [orjson.loads(d) for d in data[:-1]]
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    text = "".join(c["choices"][0]["delta"]["content"] for c in chunks[1:-1])
    assert text == "e1:tok0 e1:tok1 e1:tok2 "
    assert chunks[-2]["choices"][0]["finish_reason"] == "stop"
    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"] == {
        "prompt_tokens": 2,
        "completion_tokens": 3,
        "total_tokens": 5,
        "prompt_tokens_details": None,
    }
    assert engine.completed == 1
    assert engine.requests[0].headers["x-request-id"] == "r-1"
    assert engine.requests[0].body == body


def test_openai_client_chat_and_streaming_chat(fake_engines: StartEngines) -> None:
    _, server = _start_one(fake_engines, tokens=4)
    with openai.OpenAI(base_url=server.url + "/v1", api_key="x", max_retries=0) as client:
        reply = client.chat.completions.create(
            model="m1", messages=[{"role": "user", "content": "hi"}], max_tokens=2
        )
        assert reply.choices[0].message.content == "e1:tok0 e1:tok1 "
        assert reply.choices[0].finish_reason == "length"
        assert reply.usage is not None
        assert reply.usage.completion_tokens == 2
        with client.chat.completions.create(
            model="m1", messages=[{"role": "user", "content": "hi"}], stream=True
        ) as stream:
            parts = [c.choices[0].delta.content or "" for c in stream if c.choices]
        assert "".join(parts) == "e1:tok0 e1:tok1 e1:tok2 e1:tok3 "
        assert [m.id for m in client.models.list()] == ["m1"]


def test_completions_embeddings_responses_and_read_endpoints(
    fake_engines: StartEngines,
) -> None:
    engine, server = _start_one(fake_engines, models=("a", "b"), tokens=2)
    engine.waiting, engine.kv_cache_usage = 3, 0.25
    with httpx.Client(base_url=server.url, timeout=5) as client:
        completion = client.post("/v1/completions", json={"model": "b", "prompt": "x y z"})
        assert completion.json()["choices"][0]["text"] == "e1:tok0 e1:tok1 "
        assert completion.json()["model"] == "b"
        assert completion.json()["usage"]["prompt_tokens"] == 3
        embedding = client.post("/v1/embeddings", json={"model": "a", "input": ["p", "q"]})
        assert [d["index"] for d in embedding.json()["data"]] == [0, 1]
        response = client.post("/v1/responses", json={"model": "a", "input": "hi"})
        assert response.json()["output"][0]["content"][0]["text"] == "e1:tok0 e1:tok1 "
        health = client.get("/health")
        assert (health.status_code, health.content) == (200, b"")
        models = client.get("/v1/models").json()
        assert models["object"] == "list"
        assert [(m["id"], m["owned_by"]) for m in models["data"]] == [("a", "vllm"), ("b", "vllm")]
        metrics = client.get("/metrics").text
    assert 'vllm:num_requests_waiting{engine="0",model_name="b"} 3.0' in metrics
    assert 'vllm:kv_cache_usage_perc{engine="0",model_name="a"} 0.25' in metrics
    assert 'vllm:num_requests_running{engine="0",model_name="a"} 0.0' in metrics
    assert engine.completed == 3


def test_unknown_model_is_a_vllm_shaped_404(fake_engines: StartEngines) -> None:
    _, server = _start_one(fake_engines)
    with httpx.Client(base_url=server.url, timeout=5) as client:
        response = client.post("/v1/chat/completions", json={**CHAT, "model": "nope"})
    assert response.status_code == 404
    error = response.json()["error"]
    assert error["message"] == "The model `nope` does not exist."
    assert (error["type"], error["code"]) == ("NotFoundError", 404)


def test_client_closing_mid_stream_is_counted_as_cancelled(fake_engines: StartEngines) -> None:
    engine, server = _start_one(fake_engines, tokens=100, token_delay=0.05)
    with httpx.Client(base_url=server.url, timeout=5) as client:
        body = {**CHAT, "stream": True}
        with client.stream("POST", "/v1/chat/completions", json=body) as response:
            received = 0
            for line in response.iter_lines():
                received += line.startswith("data: ")
                if received == 2:
                    break
    wait_until(lambda: engine.cancelled == 1, within=5.0)
    assert engine.completed == 0
    assert engine.running == 0


async def test_async_client_cancellation_with_ttft_delay(fake_engines: StartEngines) -> None:
    engine, server = _start_one(fake_engines, ttft_delay=5.0)
    async with httpx.AsyncClient(base_url=server.url, timeout=0.2) as client:
        with pytest.raises(httpx.ReadTimeout):
            await client.post("/v1/chat/completions", json=CHAT)
    await async_wait_until(lambda: engine.cancelled == 1, within=5.0)
    assert engine.running == 0


def test_fail_status_and_health_status(fake_engines: StartEngines) -> None:
    engine, server = _start_one(fake_engines)
    engine.fail_status = 503
    with httpx.Client(base_url=server.url, timeout=5) as client:
        failed = client.post("/v1/chat/completions", json=CHAT)
        assert failed.status_code == 503
        assert failed.json()["error"]["type"] == "ServiceUnavailableError"
        assert client.get("/health").status_code == 200
        engine.health_status = 500
        assert client.get("/health").status_code == 500
        engine.fail_status = None
        assert client.post("/v1/chat/completions", json=CHAT).status_code == 200


@pytest.mark.parametrize("stream", [True, False])
def test_die_after_tokens_breaks_the_response(fake_engines: StartEngines, stream: bool) -> None:
    engine, server = _start_one(fake_engines, tokens=5)
    engine.die_after_tokens = 2
    lines: list[str] = []
    with (
        httpx.Client(base_url=server.url, timeout=5) as client,
        pytest.raises(httpx.RemoteProtocolError),
        client.stream("POST", "/v1/chat/completions", json={**CHAT, "stream": stream}) as response,
    ):
        lines.extend(response.iter_lines())
    if stream:
        assert len(_sse_data(lines)) == 3  # the role chunk and two tokens, no [DONE]
    assert (engine.died, engine.completed) == (1, 0)


def test_stop_refuses_connections_and_start_reuses_the_port(fake_engines: StartEngines) -> None:
    _, server = _start_one(fake_engines)
    url = server.url
    server.stop()
    with httpx.Client(timeout=5) as client:
        with pytest.raises(httpx.ConnectError):
            client.get(url + "/health")
        server.start()
        assert server.url == url
        assert client.get(url + "/health").status_code == 200
        with pytest.raises(httpx.ConnectError):
            client.get(dead_url() + "/health")


def test_kill_mid_stream_cuts_the_client_and_refuses_new_ones(
    fake_engines: StartEngines,
) -> None:
    engine, server = _start_one(fake_engines, tokens=100, token_delay=0.05)
    with httpx.Client(base_url=server.url, timeout=5) as client:
        with (
            pytest.raises(httpx.RemoteProtocolError),
            client.stream(
                "POST", "/v1/completions", json={"model": "m1", "prompt": "p", "stream": True}
            ) as response,
        ):
            for line in response.iter_lines():
                if line.startswith("data: "):
                    server.kill()
        with pytest.raises(httpx.ConnectError):
            client.get("/health")
    assert (engine.cancelled, engine.completed) == (1, 0)


def test_graceful_stop_cuts_a_stream_that_outlives_the_grace_period() -> None:
    engine = FakeEngine(tokens=100, token_delay=0.05)
    body = {"model": "m1", "prompt": "p", "stream": True}
    with (
        ServerThread(engine.app, graceful_timeout=0.2) as server,
        httpx.Client(base_url=server.url, timeout=5) as client,
        pytest.raises(httpx.RemoteProtocolError),
        client.stream("POST", "/v1/completions", json=body) as response,
    ):
        for line in response.iter_lines():
            if line.startswith("data: ") and server.running:
                server.stop()
    assert (engine.running, engine.completed) == (0, 0)
