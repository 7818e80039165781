"""`kvgate serve` with tuning on starts `kvgate tune` beside itself: the tuner's proposals
reach /admin/tuning, a tuner that dies is started again, and a gateway killed outright
leaves no tuner behind."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import httpx

from tests.support.fixture_types import ServeApp
from tests.support.gateway_process import GatewayProcess, gateway_config
from tests.support.tuning_traffic import chats, emulated_fleet
from tests.support.waiting import wait_until

TUNING = {
    "mode": "shadow",
    "interval_s": 1.0,
    "window_s": 60.0,
    "min_requests": 10,
    "seeds": 1,
    "search": 0,
    "candidates": ["prefix-aware"],
    "engine_profile": "demo",
}


def _children(pid: int) -> list[int]:
    """The processes whose parent is `pid` (from /proc)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:  # gone meanwhile
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            found.append(int(entry))
    return found


def _tuners(gateway_pid: int) -> list[int]:
    tuners = []
    for child in _children(gateway_pid):
        try:
            cmdline = Path(f"/proc/{child}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"tune" in cmdline and b"--parent" in cmdline:
            tuners.append(child)
    return tuners


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_the_gateway_runs_the_tuner_beside_itself(serve_app: ServeApp, tmp_path: Path) -> None:
    record = tmp_path / "recorded.jsonl"
    config = gateway_config(
        emulated_fleet(serve_app),
        server={"access_log": False, "record_path": str(record)},
        tuning=TUNING,
    )
    gateway = GatewayProcess(config, tmp_path / "gw").start()
    try:
        wait_until(lambda: len(_tuners(gateway.pid)) == 1, within=20.0)
        [first] = _tuners(gateway.pid)
        assert set(chats(gateway.url, 8, seed=1)) == {200}

        def proposed() -> bool:
            state = httpx.get(gateway.url + "/admin/tuning", timeout=5).json()
            return state.get("proposal") is not None

        wait_until(proposed, within=60.0, step=0.2)
        state = httpx.get(gateway.url + "/admin/tuning", timeout=5).json()
        assert state["mode"] == "shadow" and state["live_profile"] == "round-robin"
        assert state["proposal"]["best"] == "prefix-aware" and state["switches"] == []
        loops = httpx.get(gateway.url + "/admin/backends", timeout=5).json()["loops"]
        assert loops["tuner"] == "running"

        os.kill(first, signal.SIGKILL)  # the supervisor starts another
        wait_until(lambda: _tuners(gateway.pid) not in ([], [first]), within=20.0)
        [second] = _tuners(gateway.pid)
        assert "the tuner (pid" in gateway.log_text()
    finally:
        gateway.stop()  # SIGKILL: the gateway cannot stop its child
    deadline = time.monotonic() + 10.0
    while _alive(second) and time.monotonic() < deadline:  # it notices its parent is gone
        time.sleep(0.1)
    assert not _alive(second)


def test_no_tuner_without_a_recording_or_with_spawn_off(
    serve_app: ServeApp, tmp_path: Path
) -> None:
    fleet = emulated_fleet(serve_app)
    unrecorded = gateway_config(fleet, tuning=TUNING)
    gateway = GatewayProcess(unrecorded, tmp_path / "a").start()
    try:
        time.sleep(1.0)
        assert _tuners(gateway.pid) == []
        assert "the tuner is not started: no recording to replay" in gateway.log_text()
    finally:
        gateway.stop()
    record = tmp_path / "recorded.jsonl"
    separate = gateway_config(
        fleet, server={"record_path": str(record)}, tuning={**TUNING, "spawn": False}
    )
    gateway = GatewayProcess(separate, tmp_path / "b").start()
    try:
        time.sleep(1.0)
        assert _tuners(gateway.pid) == []
    finally:
        gateway.stop()
