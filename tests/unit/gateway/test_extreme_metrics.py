"""The most extreme metrics an engine page can yield (issue 15: parsing bounds them) route
and feed the prefix index without error under every built-in profile."""

from __future__ import annotations

import itertools

import orjson
import pytest

from gateway.app import build_app
from gateway.inference_request import parse_inference_body
from gateway.usage import Usage
from routing.config.schema import parse_config
from routing.types import EngineMetrics

MAX_COUNT = 2**53  # adapters.metric_map: larger counts are unknown
BODY = orjson.dumps({"model": "m", "messages": [{"role": "user", "content": "hello " * 50}]})
PROFILES = sorted(
    build_app(parse_config({"backends": [{"url": "http://a:1"}]})).runtime.scheduler.profiles
)


def _extremes() -> list[EngineMetrics]:
    counts, kv, block = (None, 0, MAX_COUNT), (None, 0.0, 1.0), (None, 1, 4096)
    return [
        EngineMetrics(0.0, waiting=w, running=r, kv_usage=k, block_size=b, num_blocks=n)
        for w, r, k, b, n in itertools.product(counts, counts, kv, block, counts)
    ]


@pytest.mark.parametrize("profile", PROFILES)
def test_extreme_metrics_route_without_error(profile: str) -> None:
    backends = [{"url": "http://a:1", "models": ["m"]}, {"url": "http://b:1", "models": ["m"]}]
    app = build_app(parse_config({"backends": backends, "routing": {"policy": profile}}))
    for backend in app.runtime.pool:
        backend.state.record_probe(True, 0.0)
    for metrics in _extremes():
        for backend in app.runtime.pool:
            backend.metrics = EngineMetrics(
                app.runtime.clock(), metrics.waiting, metrics.running, metrics.kv_usage,
                metrics.block_size, metrics.num_blocks, max_loras=MAX_COUNT,
            )  # fmt: skip
        route = app.runtime.router.route(parse_inference_body("chat", BODY), {}, "rid")
        target = app.runtime.pool.get(route.decision.target)
        dispatched = app.runtime.ledger.dispatch(target, route.request, app.runtime.clock())
        app.runtime.ledger.observe(dispatched, Usage(300, 100, 5))
