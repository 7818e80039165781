"""The bodies each P/D protocol sends its prefill and decode backends."""

from __future__ import annotations

import random

import orjson

from gateway.pd_legs import (
    SGLANG_BOOTSTRAP_PORT,
    new_room,
    sglang_body,
    vllm_decode_body,
    vllm_prefill_body,
)
from health.pool import Backend, BackendSpec
from health.state import HealthPolicy, HealthState


def test_vllm_prefill_asks_one_whole_token_and_a_remote_decode() -> None:
    client = {
        "model": "m",
        "messages": [{"role": "user", "content": "hi"}],
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_tokens": 200,
        "max_completion_tokens": 200,
        "min_tokens": 5,
        "n": 3,
        "temperature": 0,
    }
    p = orjson.loads(vllm_prefill_body(client))
    assert p["stream"] is False and "stream_options" not in p and "min_tokens" not in p
    assert p["max_tokens"] == 1 and p["max_completion_tokens"] == 1 and p["n"] == 1
    assert p["kv_transfer_params"]["do_remote_decode"] is True
    assert p["kv_transfer_params"]["do_remote_prefill"] is False
    assert p["messages"] == client["messages"] and p["temperature"] == 0
    assert "max_completion_tokens" not in orjson.loads(vllm_prefill_body({"model": "m"}))


def test_vllm_decode_gets_the_client_body_with_p_params_verbatim() -> None:
    params = {"do_remote_prefill": True, "remote_block_ids": [3, 1], "remote_engine_id": "e"}
    body = orjson.dumps({"model": "m", "prompt": "x", "stream": True, "max_tokens": 9})
    d = orjson.loads(vllm_decode_body(body, params))
    assert d == {"model": "m", "prompt": "x", "stream": True, "max_tokens": 9,
                 "kv_transfer_params": params}  # fmt: skip


def test_sglang_body_names_p_bootstrap_and_a_63_bit_room() -> None:
    policy = HealthState(HealthPolicy())
    p = Backend(BackendSpec("http://10.0.0.7:30000", role="prefill", bootstrap_port=9000), policy)
    room = new_room(random.Random(1))
    assert 0 <= room < 2**63
    out = orjson.loads(sglang_body(b'{"model":"m","text":"hi"}', p, room))
    assert out == {"model": "m", "text": "hi", "bootstrap_host": "10.0.0.7",
                   "bootstrap_port": 9000, "bootstrap_room": room}  # fmt: skip
    default = Backend(BackendSpec("http://p:1", role="prefill"), policy)
    assert orjson.loads(sglang_body(b"{}", default, 1))["bootstrap_port"] == SGLANG_BOOTSTRAP_PORT
