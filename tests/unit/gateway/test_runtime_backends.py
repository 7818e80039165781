"""RuntimeBackends: what the admin API and config reloads change in the app's pool."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.app import GatewayApp, build_app
from gateway.errors import ConflictError, NotFoundError
from health.pool import BackendSpec
from routing.config.schema import BackendEntry, parse_config
from routing.types import Health


def _app(**raw: Any) -> GatewayApp:
    return build_app(parse_config({"backends": [{"url": "http://a:1", "id": "a"}], **raw}))


def _forgotten(app: GatewayApp) -> list[str]:
    forgotten: list[str] = []
    app.runtime.ledger.forget = forgotten.append  # type: ignore[method-assign]
    return forgotten


def test_an_added_backend_joins_the_pool_unprobed_and_owned_by_the_admin() -> None:
    app = _app()
    backend = app.runtime.backends.add(BackendEntry(url="http://b:2", engine="sglang"))
    assert backend is app.runtime.pool.get("b:2")
    assert backend.spec.engine == "sglang"
    assert backend.health(app.runtime.pool.now()) is Health.UNKNOWN  # routed to once probed healthy
    assert app.runtime.backends.owner("b:2") == "admin"
    assert app.runtime.backends.owner("a") == "config"
    with pytest.raises(ConflictError, match="'b:2' is taken"):
        app.runtime.backends.add(BackendEntry(url="http://b:2"))


def test_a_drained_backend_gets_no_new_request_and_resume_undoes_it() -> None:
    app = _app()
    backend = app.runtime.pool.get("a")
    backend.state.record_probe(True, 0.0)
    assert [b.id for b in app.runtime.pool.healthy()] == ["a"]
    app.runtime.backends.drain("a")
    assert backend.draining and app.runtime.pool.healthy() == []
    [snap] = app.runtime.pool.snapshots()
    assert snap.health is Health.DRAINING  # what the router sees: not a candidate
    app.runtime.backends.resume("a")
    assert [b.id for b in app.runtime.pool.healthy()] == ["a"]
    with pytest.raises(NotFoundError):
        app.runtime.backends.drain("nope")


def test_removing_an_idle_backend_forgets_it_at_once() -> None:
    app = _app()
    app.runtime.backends.add(BackendEntry(url="http://b:2", id="b", kv_events="tcp://b:5557"))
    assert "b" in app.runtime.kv_loops.subscribers
    forgotten = _forgotten(app)
    assert app.runtime.backends.remove("b") is True
    assert app.runtime.pool.find("b") is None
    assert "b" not in app.runtime.kv_loops.subscribers  # its subscriber stopped
    assert forgotten == ["b"]


def test_a_busy_backend_drains_then_leaves_when_its_last_request_ends() -> None:
    app = _app()
    backend = app.runtime.backends.add(BackendEntry(url="http://b:2", id="b"))
    forgotten = _forgotten(app)
    backend.in_flight = 2
    assert app.runtime.backends.remove("b") is False
    assert backend.draining and app.runtime.pool.find("b") is backend
    assert app.runtime.backends.describe(backend)["remove_when_idle"] is True
    app.runtime.backends.settle()
    assert app.runtime.pool.find("b") is backend  # still busy
    backend.in_flight = 0
    app.runtime.backends.settle()
    assert app.runtime.pool.find("b") is None
    assert forgotten == ["b"]


def test_a_forced_removal_leaves_now_and_forgets_once_its_requests_end() -> None:
    app = _app()
    backend = app.runtime.backends.add(BackendEntry(url="http://b:2", id="b"))
    forgotten = _forgotten(app)
    backend.in_flight = 1
    assert app.runtime.backends.remove("b", force=True) is True
    assert app.runtime.pool.find("b") is None
    app.runtime.backends.settle()
    assert forgotten == []  # what its last request reports must not bring it back
    backend.in_flight = 0
    app.runtime.backends.settle()
    assert forgotten == ["b"]


def test_drain_with_remove_takes_an_idle_backend_out_at_the_next_check() -> None:
    app = _app()
    app.runtime.backends.add(BackendEntry(url="http://b:2", id="b"))
    app.runtime.backends.drain("b", remove=True)
    assert app.runtime.pool.find("b") is not None
    app.runtime.backends.settle()
    assert app.runtime.pool.find("b") is None


def test_resume_calls_off_a_pending_removal() -> None:
    app = _app()
    backend = app.runtime.backends.add(BackendEntry(url="http://b:2", id="b"))
    backend.in_flight = 1
    app.runtime.backends.remove("b")
    app.runtime.backends.resume("b")
    backend.in_flight = 0
    app.runtime.backends.settle()
    assert app.runtime.pool.find("b") is backend and not backend.draining


def test_a_discovered_backend_can_be_drained_not_removed() -> None:
    app = build_app(parse_config({"discovery": {"pool": "llm"}}))
    app.runtime.pod_backends.apply([BackendSpec("http://10.0.0.1:8000")])
    assert app.runtime.backends.owner("10.0.0.1:8000") == "discovery"
    app.runtime.backends.drain("10.0.0.1:8000")
    with pytest.raises(ConflictError, match="pod discovery"):
        app.runtime.backends.remove("10.0.0.1:8000")
    with pytest.raises(ConflictError):
        app.runtime.backends.drain("10.0.0.1:8000", remove=True)


def test_apply_config_adds_removes_and_updates_config_backends_only() -> None:
    app = _app()
    app.runtime.backends.add(BackendEntry(url="http://admin:9", id="admin"))
    a = app.runtime.pool.get("a")
    forgotten = _forgotten(app)
    changes = app.runtime.backends.apply_config(
        [
            BackendEntry(url="http://a:1", id="a", models=["m"]),  # models changed
            BackendEntry(url="http://c:3", id="c"),
        ]
    )
    assert (changes.added, changes.removed, changes.updated) == (("c",), (), ("a",))
    assert app.runtime.pool.get("a") is a and a.spec.models == ("m",)  # same engine: kept in place
    assert sorted(b.id for b in app.runtime.pool) == ["a", "admin", "c"]  # the admin's stays
    changes = app.runtime.backends.apply_config([BackendEntry(url="http://a2:1", id="a")])
    assert (changes.removed, changes.updated) == (("c",), ("a",))
    assert app.runtime.pool.get("a") is not a  # another url: another engine, what it learnt goes
    assert app.runtime.pool.get("a").spec.url == "http://a2:1"
    assert forgotten == ["c", "a"]
    changes = app.runtime.backends.apply_config([BackendEntry(url="http://a2:1", id="a")])
    assert changes == type(changes)()  # nothing to do


def test_a_config_entry_naming_an_admin_backend_adopts_it() -> None:
    app = _app()
    added = app.runtime.backends.add(BackendEntry(url="http://b:2", id="b"))
    changes = app.runtime.backends.apply_config(
        [BackendEntry(url="http://a:1", id="a"), BackendEntry(url="http://b:2", id="b")]
    )
    assert changes.added == () and changes.updated == ()
    assert app.runtime.pool.get("b") is added and app.runtime.backends.owner("b") == "config"
    app.runtime.backends.apply_config([BackendEntry(url="http://a:1", id="a")])
    assert app.runtime.pool.find("b") is None  # now the file's to remove


def test_kv_events_follow_a_config_update() -> None:
    app = _app()
    app.runtime.backends.apply_config(
        [BackendEntry(url="http://a:1", id="a", kv_events="tcp://a:5557")]
    )
    assert app.runtime.kv_loops.subscribers["a"].settings.endpoint == "tcp://a:5557"
    app.runtime.backends.apply_config([BackendEntry(url="http://a:1", id="a")])
    assert "a" not in app.runtime.kv_loops.subscribers
