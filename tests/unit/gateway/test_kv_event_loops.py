"""KvEventLoops with PodBackends: discovered publishers join and leave the subscriber map, the
supervisor's report and the precise index (no sockets: the supervisor is not run)."""

from __future__ import annotations

from adapters.kv_events import KvEventBatch
from gateway.app import GatewayApp, build_app
from gateway.kv_event_loops import source_settings
from gateway.supervisor import Supervisor
from health.discovery.endpoints import KvEventsSource
from health.kv_events import KvEventsSettings
from health.pool import BackendSpec
from routing.config.schema import parse_config
from routing.kv_events import BlockStored

POD = "10.0.0.1:8000"
STATIC = {"url": "http://static:1", "kv_events": "tcp://static:5557"}


def _app() -> tuple[GatewayApp, Supervisor]:
    app = build_app(parse_config({"backends": [STATIC], "discovery": {"pool": "llm"}}))
    sup = Supervisor()
    app.runtime.kv_loops.attach(sup)
    return app, sup


def _settings(port: int) -> dict[str, KvEventsSettings]:
    return {POD: source_settings(KvEventsSource(f"tcp://10.0.0.1:{port}", None, "kv"))}


def test_a_discovered_publisher_is_followed_while_its_backend_stays() -> None:
    app, sup = _app()
    assert set(sup.states()) == {"kv-events:static:1"}
    app.runtime.pod_backends.apply([BackendSpec(f"http://{POD}", engine="vllm")], _settings(5557))
    assert set(app.runtime.kv_loops.subscribers) == {"static:1", POD}
    assert app.runtime.kv_loops.subscribers[POD].settings == KvEventsSettings(
        "tcp://10.0.0.1:5557", None, "kv"
    )
    assert set(sup.states()) == {"kv-events:static:1", f"kv-events:{POD}"}
    app.runtime.stack.precise.apply(POD, [BlockStored((1, 2), None, tuple(range(32)), 16)])
    assert app.runtime.stack.precise.blocks(POD) == 2
    page = app.runtime.metrics.render().decode()
    assert f'kvgate_kv_events_batches_total{{backend="{POD}"}}' in page

    subscriber = app.runtime.kv_loops.subscribers[POD]
    app.runtime.pod_backends.apply([BackendSpec(f"http://{POD}", engine="vllm")], _settings(5557))
    assert app.runtime.kv_loops.subscribers[POD] is subscriber  # same publisher: left alone
    assert app.runtime.stack.precise.blocks(POD) == 2

    app.runtime.pod_backends.apply([])  # the pod left
    assert set(app.runtime.kv_loops.subscribers) == {"static:1"}
    assert set(sup.states()) == {"kv-events:static:1"}
    assert not app.runtime.stack.precise.tracks(POD)
    assert POD not in app.runtime.metrics.render().decode()


def test_a_changed_or_removed_annotation_restarts_or_stops_the_loop() -> None:
    app, sup = _app()
    spec = BackendSpec(f"http://{POD}", engine="vllm")
    app.runtime.pod_backends.apply([spec], _settings(5557))
    first = app.runtime.kv_loops.subscribers[POD]
    app.runtime.stack.precise.apply(POD, [BlockStored((1,), None, tuple(range(16)), 16)])
    app.runtime.pod_backends.apply([spec], _settings(6000))  # moved publisher
    assert app.runtime.kv_loops.subscribers[POD] is not first
    assert app.runtime.kv_loops.subscribers[POD].settings.endpoint == "tcp://10.0.0.1:6000"
    assert f"kv-events:{POD}" in sup.states()
    assert not app.runtime.stack.precise.tracks(POD)  # another stream: its view starts over
    app.runtime.pod_backends.apply([spec])  # annotation gone, backend stays
    assert [b.id for b in app.runtime.pool] == ["static:1", POD]
    assert POD not in app.runtime.kv_loops.subscribers
    assert f"kv-events:{POD}" not in sup.states()


def test_a_discovered_endpoint_that_is_configured_keeps_its_configured_publisher() -> None:
    app, sup = _app()
    configured = app.runtime.kv_loops.subscribers["static:1"]
    other = {"static:1": KvEventsSettings("tcp://elsewhere:1")}
    app.runtime.pod_backends.apply([BackendSpec("http://static:1", engine="vllm")], other)
    assert app.runtime.kv_loops.subscribers["static:1"] is configured
    app.runtime.pod_backends.apply([])
    assert app.runtime.kv_loops.subscribers["static:1"] is configured
    assert set(sup.states()) == {"kv-events:static:1"}


def test_publishers_found_before_the_loops_run_are_supervised_once_they_do() -> None:
    app = build_app(parse_config({"discovery": {"pool": "llm"}}))
    app.runtime.pod_backends.apply([BackendSpec(f"http://{POD}", engine="vllm")], _settings(5557))
    sup = Supervisor()
    app.runtime.kv_loops.attach(sup)
    assert set(sup.states()) == {f"kv-events:{POD}"}


def test_a_data_parallel_engine_is_followed_per_rank_and_batches_go_by_their_rank() -> None:
    engine = {"url": "http://dp:1", "dp_size": 2, "kv_events": "tcp://dp:6000"}
    app = build_app(parse_config({"backends": [engine]}))
    loops = app.runtime.kv_loops
    assert {k: s.settings.endpoint for k, s in loops.subscribers.items()} == {
        "dp:1@0": "tcp://dp:6000",
        "dp:1@1": "tcp://dp:6001",
    }
    stored = BlockStored((1, 2), None, tuple(range(32)), 16)
    batch = KvEventBatch(seq=0, timestamp=0.0, events=(stored,), dp_rank=1)
    loops.subscribers["dp:1@0"]._deliver(batch)  # the batch names rank 1: it is rank 1's
    precise = app.runtime.stack.precise
    assert (precise.blocks("dp:1@0"), precise.blocks("dp:1@1")) == (0, 2)
    loops.forget("dp:1")
    assert loops.subscribers == {} and precise.blocks("dp:1@1") == 0


def test_a_followed_engine_found_data_parallel_is_followed_per_rank() -> None:
    app = build_app(
        parse_config({"backends": [{"url": "http://dp:1", "kv_events": "tcp://dp:6000"}]})
    )
    loops = app.runtime.kv_loops
    assert set(loops.subscribers) == {"dp:1"}
    app.runtime.pool.set_ranks("dp:1", 3)
    assert {k: s.settings.endpoint for k, s in loops.subscribers.items()} == {
        "dp:1@0": "tcp://dp:6000",
        "dp:1@1": "tcp://dp:6001",
        "dp:1@2": "tcp://dp:6002",
    }
