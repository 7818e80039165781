"""PodBackends: what pod discovery changes in the app's pool, and what it leaves alone."""

from __future__ import annotations

import pytest

from gateway.app import build_app
from health.pool import BackendSpec
from routing.config.schema import ConfigError, parse_config


def test_discovered_backends_are_added_and_removed_configured_ones_kept() -> None:
    app = build_app(
        parse_config({"backends": [{"url": "http://static:1"}], "discovery": {"pool": "llm"}})
    )
    forgotten: list[str] = []
    app.runtime.ledger.forget = forgotten.append  # type: ignore[method-assign]
    app.runtime.pod_backends.apply([BackendSpec("http://10.0.0.1:8000", engine="sglang")])
    assert sorted(b.id for b in app.runtime.pool) == ["10.0.0.1:8000", "static:1"]
    assert app.runtime.pool.get("10.0.0.1:8000").spec.engine == "sglang"
    app.runtime.pod_backends.apply(
        [BackendSpec("http://10.0.0.1:8000", engine="vllm"), BackendSpec("http://static:1")]
    )
    assert sorted(b.id for b in app.runtime.pool) == ["10.0.0.1:8000", "static:1"]
    assert app.runtime.pool.get("10.0.0.1:8000").spec.engine == "vllm"  # relabelled: re-added
    app.runtime.pod_backends.apply([BackendSpec("http://10.0.0.2:8000")])
    assert sorted(b.id for b in app.runtime.pool) == ["10.0.0.2:8000", "static:1"]
    assert forgotten == ["10.0.0.1:8000"] * 2  # its prefix-index entries go with it
    app.runtime.pod_backends.apply([])
    assert [b.id for b in app.runtime.pool] == ["static:1"]


def test_a_removed_backend_leaves_no_gauge_or_learnt_ttft_behind() -> None:
    app = build_app(parse_config({"discovery": {"pool": "llm"}}))
    app.runtime.pod_backends.apply([BackendSpec("http://10.0.0.1:8000")])
    app.runtime.metrics.backend_up.labels("10.0.0.1:8000").set(1)
    app.runtime.metrics.in_flight.labels("10.0.0.1:8000").set(0)
    for work in range(100, 1700, 100):  # enough samples for a fit of its own
        app.runtime.stack.ttft_model.observe("10.0.0.1:8000", float(work), 0.05 + work * 0.0004)
    assert (
        app.runtime.stack.ttft_model.coefficients("10.0.0.1:8000")
        != app.runtime.stack.ttft_model.prior
    )
    assert b"10.0.0.1:8000" in app.runtime.metrics.render()
    app.runtime.pod_backends.apply([])
    assert b"10.0.0.1:8000" not in app.runtime.metrics.render()
    assert (
        app.runtime.stack.ttft_model.coefficients("10.0.0.1:8000")
        == app.runtime.stack.ttft_model.prior
    )


def test_a_pool_alone_is_enough_backends() -> None:
    assert len(build_app(parse_config({"discovery": {"pool": "llm"}})).runtime.pool) == 0
    with pytest.raises(ConfigError, match="--pool"):
        build_app(parse_config({}))
