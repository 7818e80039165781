"""The director's accounting that no transport test pins down on its own."""

from __future__ import annotations

import random

import orjson

from gateway.compose import build_runtime
from routing.config.schema import parse_config


async def test_an_ejection_is_counted_from_zero() -> None:
    raw = {
        "backends": [{"url": "http://10.0.0.1:8000", "id": "b1", "models": ["m"]}],
        "health": {"passive_fail_threshold": 2},
    }
    rt = build_runtime(parse_config(raw), clock=lambda: 0.0, rng=random.Random(0))
    for backend in rt.pool:
        backend.state.record_probe(True, 0.0)
    series = 'kvgate_backend_ejections_total{backend="b1"}'
    assert f"{series} 0.0" in rt.metrics_page().decode()  # there before any ejection
    director = rt.director
    body = orjson.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]})
    attempts = []
    for _ in range(3):  # three requests in flight on b1
        rec = director.start("POST", "/v1/chat/completions", {})
        route = director.pick(rec, await director.parse("chat", body), {})
        attempts.append(director.dispatch(rec, route, rt.pool.find("b1")))  # type: ignore[arg-type]
    for attempt in attempts:  # the second 503 in a row ejects; the third finds it ejected
        director.answered(attempt, 503)
        director.end(attempt)
    assert f"{series} 1.0" in rt.metrics_page().decode()
