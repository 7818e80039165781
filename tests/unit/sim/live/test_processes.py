"""The child-process wrapper: log lines, exit detection, stop by pid; no sockets."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from sim.live.processes import ChildProcess, gateway_command

SERVE = "import time; print('ready at http://x:1', flush=True); time.sleep(60)"


def test_waits_for_a_log_line_and_stops_the_process(tmp_path: Path) -> None:
    with ChildProcess([sys.executable, "-c", SERVE], tmp_path / "child.log").start() as child:
        [m] = child.wait_for_line(r"ready at (\S+)", timeout_s=20)
        assert m.group(1) == "http://x:1"
        assert child.running
    assert not child.running
    child.stop()  # a second stop is harmless


def test_a_child_that_exits_is_reported_with_its_log(tmp_path: Path) -> None:
    code = "import sys; print('bad config', flush=True); sys.exit(3)"
    child = ChildProcess([sys.executable, "-c", code], tmp_path / "child.log").start()
    with child, pytest.raises(RuntimeError, match=r"code 3:\n.*bad config"):
        child.wait_for_line("never", timeout_s=20)


def test_environment_is_added_to_and_removed_from(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KVGATE_TEST_GONE", "1")
    code = "import os; print(os.environ.get('KVGATE_TEST_SET'), 'KVGATE_TEST_GONE' in os.environ)"
    env = {"KVGATE_TEST_SET": "yes", "KVGATE_TEST_GONE": None}
    with ChildProcess([sys.executable, "-c", code], tmp_path / "c.log", env=env).start() as c:
        c.wait_for_line("yes False", timeout_s=20)


def test_gateway_command_serves_each_backend_on_loopback() -> None:
    cmd = gateway_command(["http://a", "http://b"], "session", port=9, python="py")
    assert cmd[:4] == ["py", "-m", "kvgate.cli", "serve"]
    assert cmd[cmd.index("--host") + 1] == "127.0.0.1" and cmd[cmd.index("--port") + 1] == "9"
    assert cmd[cmd.index("--policy") + 1] == "session"
    assert [cmd[i + 1] for i, a in enumerate(cmd) if a == "--backend"] == ["http://a", "http://b"]
