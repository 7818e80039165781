"""The floor relays (bare protocols, and kvgate's server and upstream client) pass requests
and responses through unchanged, streaming included."""

from __future__ import annotations

import sys
from pathlib import Path

import httpx
import pytest

from bench.overhead.fleet import FLOORS, MODEL, start_stub_fleet
from sim.live.processes import ChildProcess, free_port

REPO = Path(__file__).resolve().parents[4]
BODY = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}


@pytest.mark.parametrize("floor", sorted(FLOORS))
def test_the_floor_relays_bytes_unchanged(tmp_path: Path, floor: str) -> None:
    env = {"PYTHONPATH": str(REPO)}
    fleet = start_stub_fleet(2, tmp_path / "engine.log")
    with fleet.process:
        urls = fleet.urls
        port = free_port()
        relay = [sys.executable, "-m", FLOORS[floor], "--port", str(port)]
        relay += [arg for url in urls for arg in ("--backend", url)]
        with ChildProcess(relay, tmp_path / "floor.log", env=env).start() as proc:
            floor = f"http://127.0.0.1:{port}"
            proc.wait_for_http(floor + "/v1/models")
            with httpx.Client(base_url=floor) as via, httpx.Client(base_url=urls[0]) as direct:
                for stream in (False, True, False, True):  # kept alive across requests
                    body = {**BODY, "stream": stream}
                    got = via.post("/v1/chat/completions", json=body)
                    want = direct.post("/v1/chat/completions", json=body)
                    assert got.status_code == want.status_code == 200
                    assert got.content == want.content and got.content
                assert via.get("/nowhere").status_code == 404
