"""`gateway.tuner_child`: the child's command line, a child that exits raised for the
supervisor to restart, a cancelled one stopped, and the admin API's local address."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest

from gateway import tuner_child
from gateway.tuner_child import TunerChild, TunerExitedError, local_address


class _Scripted(TunerChild):
    """A child running a Python one-liner instead of `kvgate tune`."""

    def command(self, admin_url: str) -> list[str]:
        return [sys.executable, "-c", self.arguments[0], admin_url]


def test_the_command_runs_kvgate_tune_on_the_gateways_admin_url() -> None:
    child = TunerChild(["--config", "k.yaml"], nice=False)
    assert child.command("http://127.0.0.1:9") == [
        sys.executable, "-m", "kvgate.cli", "tune", "--gateway", "http://127.0.0.1:9",
        "--config", "k.yaml",
    ]  # fmt: skip
    niced = TunerChild(["--config", "k.yaml"]).command("http://x:1")
    assert niced[:3] == ["nice", "-n", "10"] and niced[3:] == child.command("http://x:1")


async def test_a_child_that_exits_is_raised_after_the_address_is_known(tmp_path: Path) -> None:
    out = tmp_path / "seen"
    script = f"import sys; open({str(out)!r}, 'w').write(sys.argv[1]); sys.exit(3)"
    asked = iter([None, None, "http://127.0.0.1:7"])
    with pytest.raises(TunerExitedError, match="status 3"):
        await _Scripted([script]).run(lambda: next(asked))
    assert out.read_text() == "http://127.0.0.1:7"


async def test_a_cancelled_child_is_stopped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pid_file = tmp_path / "pid"
    # Ignores SIGTERM: the stop has to come to SIGKILL.
    script = (
        "import os, signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        f"open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(60)"
    )
    monkeypatch.setattr(tuner_child, "STOP_GRACE_S", 0.3)
    task = asyncio.create_task(_Scripted([script]).run(lambda: "http://x:1"))
    for _ in range(200):
        if pid_file.exists() and pid_file.read_text():
            break
        await asyncio.sleep(0.05)
    pid = int(pid_file.read_text())
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # reaped: gone


def test_local_address_reaches_wildcard_listeners_on_the_loopback() -> None:
    assert local_address("0.0.0.0", 80) == "http://127.0.0.1:80"
    assert local_address("::", 81, "https") == "https://[::1]:81"
    assert local_address("10.0.0.5", 82) == "http://10.0.0.5:82"
    assert local_address("fe80::1", 83) == "http://[fe80::1]:83"
