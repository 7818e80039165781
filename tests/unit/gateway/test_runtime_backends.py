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
    app.prefix.forget = forgotten.append  # type: ignore[method-assign]
    return forgotten


def test_an_added_backend_joins_the_pool_unprobed_and_owned_by_the_admin() -> None:
    app = _app()
    backend = app.backends.add(BackendEntry(url="http://b:2", engine="sglang"))
    assert backend is app.pool.get("b:2")
    assert backend.spec.engine == "sglang"
    assert backend.health(app.pool.now()) is Health.UNKNOWN  # routed to once probed healthy
    assert app.backends.owner("b:2") == "admin"
    assert app.backends.owner("a") == "config"
    with pytest.raises(ConflictError, match="'b:2' is taken"):
        app.backends.add(BackendEntry(url="http://b:2"))


def test_a_drained_backend_gets_no_new_request_and_resume_undoes_it() -> None:
    app = _app()
    backend = app.pool.get("a")
    backend.state.record_probe(True, 0.0)
    assert [b.id for b in app.pool.healthy()] == ["a"]
    app.backends.drain("a")
    assert backend.draining and app.pool.healthy() == []
    [snap] = app.pool.snapshots()
    assert snap.health is Health.DRAINING  # what the router sees: not a candidate
    app.backends.resume("a")
    assert [b.id for b in app.pool.healthy()] == ["a"]
    with pytest.raises(NotFoundError):
        app.backends.drain("nope")


def test_removing_an_idle_backend_forgets_it_at_once() -> None:
    app = _app()
    app.backends.add(BackendEntry(url="http://b:2", id="b", kv_events="tcp://b:5557"))
    assert "b" in app.kv_events
    forgotten = _forgotten(app)
    assert app.backends.remove("b") is True
    assert app.pool.find("b") is None
    assert "b" not in app.kv_events  # its subscriber stopped
    assert forgotten == ["b"]


def test_a_busy_backend_drains_then_leaves_when_its_last_request_ends() -> None:
    app = _app()
    backend = app.backends.add(BackendEntry(url="http://b:2", id="b"))
    forgotten = _forgotten(app)
    backend.in_flight = 2
    assert app.backends.remove("b") is False
    assert backend.draining and app.pool.find("b") is backend
    assert app.backends.describe(backend)["remove_when_idle"] is True
    app.backends.settle()
    assert app.pool.find("b") is backend  # still busy
    backend.in_flight = 0
    app.backends.settle()
    assert app.pool.find("b") is None
    assert forgotten == ["b"]


def test_a_forced_removal_leaves_now_and_forgets_once_its_requests_end() -> None:
    app = _app()
    backend = app.backends.add(BackendEntry(url="http://b:2", id="b"))
    forgotten = _forgotten(app)
    backend.in_flight = 1
    assert app.backends.remove("b", force=True) is True
    assert app.pool.find("b") is None
    app.backends.settle()
    assert forgotten == []  # what its last request reports must not bring it back
    backend.in_flight = 0
    app.backends.settle()
    assert forgotten == ["b"]


def test_drain_with_remove_takes_an_idle_backend_out_at_the_next_check() -> None:
    app = _app()
    app.backends.add(BackendEntry(url="http://b:2", id="b"))
    app.backends.drain("b", remove=True)
    assert app.pool.find("b") is not None
    app.backends.settle()
    assert app.pool.find("b") is None


def test_resume_calls_off_a_pending_removal() -> None:
    app = _app()
    backend = app.backends.add(BackendEntry(url="http://b:2", id="b"))
    backend.in_flight = 1
    app.backends.remove("b")
    app.backends.resume("b")
    backend.in_flight = 0
    app.backends.settle()
    assert app.pool.find("b") is backend and not backend.draining


def test_a_discovered_backend_can_be_drained_not_removed() -> None:
    app = build_app(parse_config({"discovery": {"pool": "llm"}}))
    app.pod_backends.apply([BackendSpec("http://10.0.0.1:8000")])
    assert app.backends.owner("10.0.0.1:8000") == "discovery"
    app.backends.drain("10.0.0.1:8000")
    with pytest.raises(ConflictError, match="pod discovery"):
        app.backends.remove("10.0.0.1:8000")
    with pytest.raises(ConflictError):
        app.backends.drain("10.0.0.1:8000", remove=True)


def test_apply_config_adds_removes_and_updates_config_backends_only() -> None:
    app = _app()
    app.backends.add(BackendEntry(url="http://admin:9", id="admin"))
    a = app.pool.get("a")
    forgotten = _forgotten(app)
    changes = app.backends.apply_config(
        [
            BackendEntry(url="http://a:1", id="a", models=["m"]),  # models changed
            BackendEntry(url="http://c:3", id="c"),
        ]
    )
    assert (changes.added, changes.removed, changes.updated) == (("c",), (), ("a",))
    assert app.pool.get("a") is a and a.spec.models == ("m",)  # same engine: kept in place
    assert sorted(b.id for b in app.pool) == ["a", "admin", "c"]  # the admin's stays
    changes = app.backends.apply_config([BackendEntry(url="http://a2:1", id="a")])
    assert (changes.removed, changes.updated) == (("c",), ("a",))
    assert app.pool.get("a") is not a  # another url: another engine, what it learnt goes
    assert app.pool.get("a").spec.url == "http://a2:1"
    assert forgotten == ["c", "a"]
    changes = app.backends.apply_config([BackendEntry(url="http://a2:1", id="a")])
    assert changes == type(changes)()  # nothing to do


def test_a_config_entry_naming_an_admin_backend_adopts_it() -> None:
    app = _app()
    added = app.backends.add(BackendEntry(url="http://b:2", id="b"))
    changes = app.backends.apply_config(
        [BackendEntry(url="http://a:1", id="a"), BackendEntry(url="http://b:2", id="b")]
    )
    assert changes.added == () and changes.updated == ()
    assert app.pool.get("b") is added and app.backends.owner("b") == "config"
    app.backends.apply_config([BackendEntry(url="http://a:1", id="a")])
    assert app.pool.find("b") is None  # now the file's to remove


def test_kv_events_follow_a_config_update() -> None:
    app = _app()
    app.backends.apply_config([BackendEntry(url="http://a:1", id="a", kv_events="tcp://a:5557")])
    assert app.kv_events["a"].settings.endpoint == "tcp://a:5557"
    app.backends.apply_config([BackendEntry(url="http://a:1", id="a")])
    assert "a" not in app.kv_events
