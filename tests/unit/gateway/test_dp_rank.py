"""Naming the chosen rank: vLLM's header, SGLang's body field; unranked requests untouched."""

from __future__ import annotations

import orjson

from gateway.dp_rank import for_rank
from gateway.pd_legs import sglang_body
from health.pool import BackendPool, BackendSpec
from health.state import HealthPolicy

URL = "http://engine:8000"


def _rank(engine: str, rank: int = 2, **kw: object) -> object:
    pool = BackendPool([BackendSpec(URL, engine=engine, dp_size=4, **kw)], HealthPolicy(), float)  # type: ignore[arg-type]
    return pool.get(f"engine:8000@{rank}")


def test_vllm_gets_the_header_and_a_clients_own_is_replaced() -> None:
    headers, body = for_rank(_rank("vllm"), [(b"X-Data-Parallel-Rank", b"0"), (b"a", b"b")], b"{}")  # type: ignore[arg-type]
    assert headers == [(b"a", b"b"), (b"x-data-parallel-rank", b"2")] and body == b"{}"


def test_sglang_gets_the_body_field() -> None:
    headers, body = for_rank(_rank("sglang"), [(b"a", b"b")], b'{"text": "hi"}')  # type: ignore[arg-type]
    assert headers == [(b"a", b"b")]
    assert orjson.loads(body) == {"text": "hi", "routed_dp_rank": 2}
    older = _rank("sglang", 1, dp_rank_field="data_parallel_rank")
    _, body = for_rank(older, [], b'{"text": "hi"}')  # type: ignore[arg-type]
    assert orjson.loads(body) == {"text": "hi", "data_parallel_rank": 1}


def test_an_unranked_backend_gets_the_request_unchanged() -> None:
    pool = BackendPool([BackendSpec(URL, engine="sglang")], HealthPolicy(), float)  # type: ignore[arg-type]
    assert for_rank(pool.get("engine:8000"), [(b"a", b"b")], b"{}") == ([(b"a", b"b")], b"{}")


def test_sglang_pd_tells_d_the_prefill_rank() -> None:
    prefill = _rank("sglang", 3)
    data = orjson.loads(sglang_body(b'{"text": "hi"}', prefill, 7))  # type: ignore[arg-type]
    assert data["disagg_prefill_dp_rank"] == 3 and data["bootstrap_room"] == 7
