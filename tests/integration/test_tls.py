"""`kvgate serve --tls-cert --tls-key`: HTTPS with a self-signed certificate, and a rotated
certificate served to new connections without a restart (issue 15, Build 3)."""

from __future__ import annotations

import os
import re
import shutil
import signal
import ssl
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.certs import self_signed
from tests.support.fixture_types import StartEngines
from tests.support.waiting import wait_until

pytestmark = pytest.mark.timeout(60)
_LISTENING = re.compile(r"Uvicorn running on https://127\.0\.0\.1:(\d+)")


@pytest.fixture
def kvgate() -> Iterator[list[subprocess.Popen[str]]]:
    procs: list[subprocess.Popen[str]] = []
    yield procs
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGINT)
            p.wait(timeout=15)
        if p.stderr:
            p.stderr.close()


def _trusting(cert: Path) -> httpx.Client:
    return httpx.Client(verify=ssl.create_default_context(cafile=str(cert)), timeout=5)


def _health(port: int, cert: Path) -> bool:
    """True if a new connection trusting only `cert` gets /health."""
    try:
        with _trusting(cert) as c:
            return c.get(f"https://127.0.0.1:{port}/health").status_code == 200
    except httpx.ConnectError:  # the certificate did not verify
        return False


def test_serve_https_and_pick_up_a_rotated_certificate(
    fake_engines: StartEngines, kvgate: list[subprocess.Popen[str]], tmp_path: Path
) -> None:
    ((_, engine),) = fake_engines(1)
    old, new = self_signed(tmp_path, "old"), self_signed(tmp_path, "new")
    cert, key = tmp_path / "serving.crt", tmp_path / "serving.key"
    shutil.copy(old[0], cert)
    shutil.copy(old[1], key)
    argv = ["serve", "--port", "0", "--backend", engine.url]
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "kvgate.cli",
            *argv,
            "--tls-cert",
            str(cert),
            "--tls-key",
            str(key),
        ],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    kvgate.append(proc)
    assert proc.stderr is not None
    port = None
    while port is None and (line := proc.stderr.readline()):
        if m := _LISTENING.search(line):
            port = int(m.group(1))
    assert port is not None, "kvgate exited before listening"

    with _trusting(old[0]) as c:  # one connection, kept open across the rotation
        assert c.get(f"https://127.0.0.1:{port}/health").status_code == 200
        assert not _health(port, new[0])
        shutil.copy(new[0], cert)
        shutil.copy(new[1], key)
        wait_until(lambda: _health(port, new[0]), within=10, step=0.2)
        assert not _health(port, old[0])  # new connections get the new certificate
        assert c.get(f"https://127.0.0.1:{port}/health").status_code == 200  # old one lives
    assert proc.poll() is None  # no restart


def test_a_missing_key_file_is_a_config_error(tmp_path: Path) -> None:
    cert, _ = self_signed(tmp_path, "a")
    tls = ["--tls-cert", str(cert), "--tls-key", str(tmp_path / "missing.key")]
    proc = subprocess.run(
        [sys.executable, "-m", "kvgate.cli", "serve", "--backend", "http://127.0.0.1:9", *tls],
        check=False,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 2
    assert "server.tls_cert_file" in proc.stderr and "Traceback" not in proc.stderr
