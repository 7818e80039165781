"""The endpoint picker on data-parallel engines behind one port: the engine's address is the
destination, the rank named as the front door names it (vLLM's header, SGLang's body)."""

from __future__ import annotations

import random

import orjson

from gateway.compose import build_runtime
from gateway.epp.picker import EndpointPicker
from gateway.runtime import Runtime
from routing.config.schema import parse_config

A, B = "10.0.0.1:8000", "10.0.0.2:8000"


def _runtime(engine: str) -> Runtime:
    raw = {
        "backends": [
            {"url": f"http://{a}", "models": ["m"], "engine": engine, "dp_size": 2} for a in (A, B)
        ],
        "routing": {"policy": "round-robin"},
        "server": {"access_log": False},
    }
    rt = build_runtime(parse_config(raw), clock=lambda: 1.0, rng=random.Random(1))
    for backend in rt.pool.engines():
        backend.state.record_probe(True, 0.0)
    return rt


def _body() -> bytes:
    return orjson.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]})


def test_a_vllm_rank_is_its_engines_address_and_the_header() -> None:
    rt = _runtime("vllm")
    picker = EndpointPicker(rt.director, max_fallbacks=2)
    seen = set()
    for i in range(4):
        ex = picker.pick("/v1/chat/completions", {":method": "POST"}, _body(), f"r{i}")
        assert ex.attempt is not None and ex.rank is not None
        rank = ex.attempt.endpoint.spec.rank
        assert ex.rank == (b"x-data-parallel-rank", str(rank).encode())
        assert ex.destination == ex.attempt.endpoint.spec.url.split("://")[1]  # no fallback
        assert ex.rank in ex.request_headers()
        seen.add(ex.attempt.endpoint.id)
        picker.served(ex, ex.destination)  # the same address: not a skip
        assert ex.attempt.endpoint.id in seen
        picker.finish(ex, completed=True)
    assert seen == {f"{A}@0", f"{A}@1", f"{B}@0", f"{B}@1"}


def test_an_sglang_rank_goes_in_the_body() -> None:
    rt = _runtime("sglang")
    ex = EndpointPicker(rt.director).pick("/v1/chat/completions", {}, _body(), "r1")
    assert ex.rank is None and ex.attempt is not None and ex.body is not None
    assert orjson.loads(ex.body)["routed_dp_rank"] == ex.attempt.endpoint.spec.rank


def test_a_stream_that_asked_for_usage_itself_keeps_its_usage_event_on_an_sglang_rank() -> None:
    rt = _runtime("sglang")
    body = orjson.dumps(
        {
            "model": "m",
            "messages": [{"role": "user", "content": "hi"}],
            "stream": True,
            "stream_options": {"include_usage": True},
        }
    )
    picker = EndpointPicker(rt.director)
    ex = picker.pick("/v1/chat/completions", {}, body, "r1")
    assert ex.body is not None and not ex.asked_usage  # changed for the rank alone
    picker.response_status(ex, 200, "text/event-stream")
    usage = b'data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":1}}\n\n'
    assert picker.response_chunk(ex, usage, end=False) == usage  # the client's own: relayed
