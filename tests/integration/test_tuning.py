"""The live tuner beside a real gateway and emulated engines: shadow proposals shown at
/admin/tuning, an apply switch with no request errors around it, a reload that wins, a switch
reaching every gateway of a pool, one tuner per pool through a Redis lease, and a gateway
started after a switch adopting the profile the tuner published in Redis."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from gateway.app import GatewayApp
from routing.config.schema import parse_config
from sim.replay.settings import SimSettings
from sim.replay.sweep.runners import LocalRunner
from sim.tune.lease import Lease
from sim.tune.live import GatewayAdmin, LiveTuner
from tests.integration.conftest import StartGateway
from tests.support.fixture_types import ServeApp
from tests.support.redis_server import RedisServer
from tests.support.servers import ServerThread
from tests.support.tuning_traffic import chats, emulated_fleet

TUNING = {
    "min_requests": 10,
    "seeds": 2,
    "search": 1,
    "candidates": ["prefix-aware"],
    "min_gain": 0.02,
    "confidence": 0.5,
}


def _gateway(
    start_gateway: StartGateway, urls: list[str], record: Path, mode: str
) -> tuple[GatewayApp, ServerThread, LiveTuner]:
    app, gw = start_gateway(
        urls,
        policy="round-robin",
        server={"record_path": str(record)},
        tuning={"mode": mode, **TUNING},
    )
    config = app.runtime.config
    tuner = LiveTuner(config, GatewayAdmin(gw.url), record, SimSettings(), LocalRunner(1))
    return app, gw, tuner


def _wait_recorded(record: Path, lines: int) -> None:
    deadline = time.monotonic() + 10
    while record.read_text().count("\n") < lines + 1:  # + the header
        assert time.monotonic() < deadline, "the recorder did not flush"
        time.sleep(0.1)


def test_shadow_proposes_and_leaves_the_profile(
    serve_app: ServeApp, start_gateway: StartGateway, tmp_path: Path
) -> None:
    record = tmp_path / "recorded.jsonl"
    _, gw, tuner = _gateway(start_gateway, emulated_fleet(serve_app), record, "shadow")
    assert set(chats(gw.url, 8, seed=1)) == {200}
    _wait_recorded(record, 24)
    action = tuner.tick()
    assert action is not None and action.kind == "propose"
    state = httpx.get(gw.url + "/admin/tuning").json()
    assert state["mode"] == "shadow" and state["live_profile"] == "round-robin"
    proposal = state["proposal"]
    assert proposal["best"] == "prefix-aware" and proposal["predicted_gain"] > 0.02
    assert proposal["fidelity"] > 0 and proposal["engine_timing"] == "named profile demo"
    assert proposal["engine_fit"]["source"] == "named"
    assert proposal["engine_fit"]["observations"] == 24
    assert proposal["requests"] == 24
    assert [c["origin"] for c in proposal["candidates"]] == ["live", "named"]  # no knobs
    assert state["switches"] == []
    page = httpx.get(gw.url + "/metrics").text
    assert "kvgate_tuning_predicted_gain " in page and "kvgate_tuning_fidelity " in page
    assert tuner.tick() is None  # nothing recorded since: no evaluation
    assert set(chats(gw.url, 4, seed=4)) == {200}
    _wait_recorded(record, 36)
    tuner.timing = "fitted"  # 36 observed TTFTs, more than the 30 a fit needs
    assert tuner.tick() is not None
    fit = httpx.get(gw.url + "/admin/tuning").json()["proposal"]["engine_fit"]
    assert fit["source"] == "fitted" and fit["observations"] == 36 and fit["slope_s_per_token"]
    tuner.admin.close()


def test_apply_switches_without_errors_and_a_reload_wins(
    serve_app: ServeApp, start_gateway: StartGateway, tmp_path: Path
) -> None:
    record = tmp_path / "recorded.jsonl"
    app, gw, tuner = _gateway(start_gateway, emulated_fleet(serve_app), record, "apply")
    assert set(chats(gw.url, 8, seed=2)) == {200}
    _wait_recorded(record, 24)
    action = tuner.tick()
    assert action is not None and action.kind == "switch"
    assert action.target.name == "prefix-aware"
    state: dict[str, Any] = httpx.get(gw.url + "/admin/tuning").json()
    assert state["live_profile"] == "prefix-aware"
    assert state["previous_profile"] == "round-robin"
    [switch] = state["switches"]
    assert switch["kind"] == "switch" and switch["predicted_gain"] > 0.02 and switch["reason"]
    assert set(chats(gw.url, 4, seed=3)) == {200}  # no errors after the switch
    page = httpx.get(gw.url + "/metrics").text
    assert 'kvgate_tuning_switches_total{kind="switch"} 1.0' in page

    # A reload installs the file's routing again, and the tuner's next switch is refused.
    report = app.runtime.live.apply(parse_config({**_raw(app), "routing": {}}))
    assert report["policy"] == "prefix-aware"  # the file's default policy
    state = httpx.get(gw.url + "/admin/tuning").json()
    assert state["generation"] == 1 and state["live_profile"] == "prefix-aware"
    body = {"kind": "switch", "profile": "x", "spec": state["live_spec"], "generation": 0}
    refused = httpx.post(gw.url + "/admin/tuning/switch", json=body)
    assert refused.status_code == 409
    tuner.admin.close()


def _raw(app: GatewayApp) -> dict[str, Any]:
    return app.runtime.config.model_dump(mode="json", exclude_unset=True)


@pytest.mark.parametrize("mode", ["shadow", "off"])
def test_switches_need_apply(
    serve_app: ServeApp, start_gateway: StartGateway, tmp_path: Path, mode: str
) -> None:
    _, gw = start_gateway(emulated_fleet(serve_app), tuning={"mode": mode})
    state = httpx.get(gw.url + "/admin/tuning").json()
    body = {"kind": "switch", "profile": "p", "spec": state["live_spec"], "generation": 0}
    r = httpx.post(gw.url + "/admin/tuning/switch", json=body)
    assert r.status_code == 409 and "apply" in r.text


def test_one_tuner_holds_the_lease(redis_server: RedisServer) -> None:
    first = Lease(redis_server.url, "kvgate:tuner:default", ttl_s=0.3)
    second = Lease(redis_server.url, "kvgate:tuner:default", ttl_s=0.3)
    assert first.acquire() and not second.acquire()
    assert first.acquire()  # renewed by its holder
    time.sleep(0.5)  # the holder stopped renewing: the lease lapses
    assert second.acquire() and not first.acquire()
    second.release()
    assert first.acquire()
    first.release()


def test_a_switch_reaches_every_gateway_of_the_pool(
    serve_app: ServeApp, start_gateway: StartGateway, tmp_path: Path
) -> None:
    record = tmp_path / "recorded.jsonl"
    urls = emulated_fleet(serve_app)
    _, gw, tuner = _gateway(start_gateway, urls, record, "apply")
    _, other = start_gateway(urls, policy="round-robin", tuning={"mode": "apply"})
    tuner.others.append(GatewayAdmin(other.url))
    assert set(chats(gw.url, 8, seed=4)) == {200}
    _wait_recorded(record, 24)
    action = tuner.tick()
    assert action is not None and action.kind == "switch"
    for url in (gw.url, other.url):
        state = httpx.get(url + "/admin/tuning").json()
        assert state["live_profile"] == "prefix-aware", url
        assert state["proposal"]["best"] == "prefix-aware"
    for admin in (tuner.admin, *tuner.others):
        admin.close()


def test_a_gateway_started_after_a_switch_adopts_the_published_profile(
    serve_app: ServeApp, start_gateway: StartGateway, tmp_path: Path, redis_server: RedisServer
) -> None:
    record = tmp_path / "recorded.jsonl"
    urls = emulated_fleet(serve_app)
    state = {"backend": "redis", "url": redis_server.url, "namespace": "tune-test"}
    tuning = {"mode": "apply", **TUNING, "interval_s": 0.2}
    app, gw = start_gateway(
        urls, policy="round-robin", server={"record_path": str(record)}, state=state, tuning=tuning
    )
    lease = Lease(redis_server.url, "tune-test:tuner:default", ttl_s=5.0)
    config = app.runtime.config
    tuner = LiveTuner(config, GatewayAdmin(gw.url), record, SimSettings(), LocalRunner(1))
    tuner.lease = lease
    assert set(chats(gw.url, 8, seed=5)) == {200}
    _wait_recorded(record, 24)
    action = tuner.tick()
    assert action is not None and action.kind == "switch"
    # Not listed to the tuner, started after the switch: it reads the pool's profile.
    _, late = start_gateway(urls, policy="round-robin", state=state, tuning=tuning)
    deadline = time.monotonic() + 10
    while (board := httpx.get(late.url + "/admin/tuning").json())["live_profile"] != "prefix-aware":
        assert time.monotonic() < deadline, board
        time.sleep(0.1)
    assert board["switches"][-1]["kind"] == "adopt"
    assert set(chats(late.url, 2, seed=6)) == {200}
    # A gateway in shadow mode on the same Redis keeps its own profile.
    _, watcher = start_gateway(urls, policy="round-robin", state=state, tuning={"mode": "shadow"})
    time.sleep(0.5)
    assert httpx.get(watcher.url + "/admin/tuning").json()["live_profile"] == "round-robin"
    tuner.admin.close()
    lease.release()
