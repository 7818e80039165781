"""A decode replica's stand-in for llm-d's routing sidecar: when it runs P's leg, what P is
sent, and the body D serves (P's params, or the body as it came when the leg failed)."""

from __future__ import annotations

import logging
from typing import Any

import httpx
import orjson
import pytest

from sim.emulator.disagg.settings import PDSettings
from sim.emulator.disagg.sidecar import prefill_remotely, prefiller_of

P_PARAMS = {
    "do_remote_prefill": True,
    "do_remote_decode": False,
    "remote_block_ids": [4, 5],
    "remote_engine_id": "e-1",
    "remote_request_id": "cmpl-r-1",
    "remote_host": "10.0.0.5",
    "remote_port": 8001,
    "tp_size": 1,
}
CLIENT = {
    "model": "m",
    "messages": [{"role": "user", "content": "hi"}],
    "stream": True,
    "stream_options": {"include_usage": True},
    "max_tokens": 50,
    "min_tokens": 2,
}


@pytest.mark.parametrize(
    ("role", "protocol", "header", "data", "expected"),
    [
        ("decode", "vllm", "10.0.0.5:8001", CLIENT, "10.0.0.5:8001"),
        ("both", "vllm", " 10.0.0.5:8001 ", CLIENT, "10.0.0.5:8001"),
        ("decode", "vllm", None, CLIENT, None),  # no header: forwarded as it came
        ("decode", "vllm", "", CLIENT, None),
        ("prefill", "vllm", "10.0.0.5:8001", CLIENT, None),  # P has no sidecar
        ("decode", "sglang", "10.0.0.5:8001", CLIENT, None),
        # Already a decode leg (a router ran P): nothing to add.
        ("decode", "vllm", "10.0.0.5:8001", {**CLIENT, "kv_transfer_params": P_PARAMS}, None),
    ],
)
def test_the_sidecar_runs_p_first_only_on_a_vllm_decoder_named_a_prefiller(
    role: str, protocol: str, header: str | None, data: dict[str, Any], expected: str | None
) -> None:
    settings = PDSettings(role, protocol)  # type: ignore[arg-type]
    assert prefiller_of(settings, header, data) == expected


async def test_p_gets_one_whole_token_with_the_same_request_id_and_d_its_params() -> None:
    seen: list[httpx.Request] = []

    def prefiller(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"choices": [], "kv_transfer_params": P_PARAMS})

    async with httpx.AsyncClient(transport=httpx.MockTransport(prefiller)) as client:
        out = await prefill_remotely(
            client, "10.0.0.5:8001", "/v1/chat/completions", dict(CLIENT), "rid-7"
        )
    assert out == {**CLIENT, "kv_transfer_params": P_PARAMS}
    [req] = seen
    assert str(req.url) == "http://10.0.0.5:8001/v1/chat/completions"
    assert req.headers["x-request-id"] == "rid-7"
    body = orjson.loads(req.content)
    assert body["stream"] is False and body["max_tokens"] == 1 and body["n"] == 1
    assert "stream_options" not in body and "min_tokens" not in body
    assert body["kv_transfer_params"] == {
        "do_remote_decode": True,
        "do_remote_prefill": False,
        "remote_engine_id": None,
        "remote_block_ids": None,
        "remote_host": None,
        "remote_port": None,
    }
    assert body["messages"] == CLIENT["messages"]


def _refuse(request: httpx.Request) -> httpx.Response:
    raise httpx.ConnectError("connection refused", request=request)


@pytest.mark.parametrize(
    ("handler", "logged"),
    [
        (_refuse, "failed"),
        (lambda r: httpx.Response(503, json={"error": "busy"}), "answered 503"),
        (lambda r: httpx.Response(200, json={"choices": []}), "no kv_transfer_params"),
        (lambda r: httpx.Response(200, content=b"not json"), "no kv_transfer_params"),
    ],
)
async def test_a_failed_prefill_leg_leaves_the_decoder_to_prefill_alone(
    handler: Any, logged: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="sim.emulator.disagg.sidecar")
    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
        out = await prefill_remotely(client, "10.0.0.5:8001", "/v1/completions", CLIENT, "r")
    assert out == CLIENT
    assert logged in caplog.text and "prefilling here" in caplog.text
