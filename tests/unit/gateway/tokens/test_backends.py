"""The engine tokenizer asks the least busy healthy backend serving the model."""

from __future__ import annotations

from gateway.tokens.backends import healthy_backend_picker
from health.pool import BackendPool, BackendSpec
from health.state import HealthPolicy


def test_the_least_busy_healthy_backend_serving_the_model() -> None:
    specs = [
        BackendSpec(url="http://a:1", id="a", models=("m",)),
        BackendSpec(url="http://b:1", id="b", models=("m", "n")),
        BackendSpec(url="http://c:1", id="c", models=("m",)),
    ]
    pool = BackendPool(specs, HealthPolicy(), lambda: 0.0)
    pick = healthy_backend_picker(pool)
    assert pick("m") is None  # none probed yet
    for backend_id in ("a", "b"):
        pool.get(backend_id).state.record_probe(True, 0.0)
    pool.get("a").in_flight = 3
    assert pick("m") == "http://b:1"
    assert pick("n") == "http://b:1"
    pool.get("b").in_flight = 5
    assert pick("m") == "http://a:1"
    assert pick("other") is None
