"""`kvgate serve` configured by `KVGATE_*` variables, logging whole-line JSON, reloading its
watched config file; `kvgate --version` as a process."""

from __future__ import annotations

import subprocess
from pathlib import Path

import httpx
import orjson
import pytest
import yaml

from kvgate.cli.options import installed_version
from sim.live.processes import kvgate_command
from tests.support.fixture_types import StartEngines
from tests.support.gateway_process import FAST_HEALTH, GatewayProcess
from tests.support.waiting import wait_until

pytestmark = pytest.mark.timeout(60)
CHAT = {"model": "m1", "messages": [{"role": "user", "content": "hi"}]}


def test_variables_configure_serve_and_json_logs_are_whole_lines(
    fake_engines: StartEngines, tmp_path: Path
) -> None:
    (_, s1), (_, s2), (_, s3) = fake_engines(3)
    config = {"health": FAST_HEALTH, "routing": {"policy": "round-robin"}}
    env = {
        "KVGATE_BACKEND": f"{s1.url},id=one {s2.url},id=two",
        "KVGATE_POLICY": "session",
        "KVGATE_LOG_FORMAT": "json",
        "KVGATE_WATCH_CONFIG": "0.1",
        "KVGATE_PORT": "1",  # the --port 0 the test gives wins
    }
    gw = GatewayProcess(config, tmp_path / "gw", env=env).start()
    try:
        assert gw.port != 1
        with httpx.Client(base_url=gw.url, timeout=10.0) as c:
            for i in range(3):
                answer = c.post(
                    "/v1/chat/completions", json=CHAT, headers={"x-request-id": f"env-{i}"}
                )
                assert answer.status_code == 200, answer.text
            backends = c.get("/admin/backends").json()["backends"]
            assert {b["id"] for b in backends} == {"one", "two"}
            assert _policy(c) == "session"  # the variable over the file's round-robin
            # the watched file changes: its backend joins the variable's, which stay
            (tmp_path / "gw" / "kvgate.yaml").write_text(
                yaml.safe_dump({**config, "backends": [{"url": s3.url, "id": "three"}]})
            )
            wait_until(lambda: len(c.get("/admin/backends").json()["backends"]) == 3, within=10)
            assert _policy(c) == "session"
    finally:
        gw.stop()
    lines = [orjson.loads(line) for line in gw.log_text().splitlines()]  # every line parses
    assert all({"ts", "level", "logger", "message", "request_id"} <= set(x) for x in lines)
    access = [x for x in lines if x["logger"] == "gateway.access"]
    access = [x for x in access if x["path"] == "/v1/chat/completions"]  # not the admin calls
    assert [x["request_id"] for x in access] == ["env-0", "env-1", "env-2"]
    assert all(x["message"] == "request" and x["status"] == 200 for x in access)
    assert {x["backend"] for x in access} <= {"one", "two"}
    assert any("Uvicorn running on" in str(x["message"]) for x in lines)
    assert any(str(x["message"]).startswith("config reloaded: backends +1") for x in lines)


def _policy(c: httpx.Client) -> str:
    answer = c.post("/admin/route", json=CHAT)
    assert answer.status_code == 200, answer.text
    policy: str = answer.json()["decision"]["policy"]
    return policy


def test_version_prints_the_installedinstalled_version() -> None:
    done = subprocess.run(
        kvgate_command("--version"), capture_output=True, text=True, timeout=30, check=False
    )
    assert done.returncode == 0
    assert done.stdout.splitlines()[0] == f"kvgate {installed_version()}"
    assert done.stdout.splitlines()[1].startswith(("compiled: ", "pure Python"))
    assert "unknown" not in done.stdout  # the test runs against the installed distribution


def test_a_bad_variable_stops_serve_with_status_2() -> None:
    done = subprocess.run(
        kvgate_command("serve", "--backend", "http://127.0.0.1:1"),
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
        env={"PATH": "/usr/bin:/bin", "KVGATE_ADMIN_PORT": "nine"},
    )
    assert done.returncode == 2
    assert "KVGATE_ADMIN_PORT='nine'" in done.stderr
