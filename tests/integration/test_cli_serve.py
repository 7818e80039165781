"""`kvgate serve` as a real process: starts, serves, logs one line per request, stops."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import orjson
import pytest

from gateway.auth import hash_key
from tests.support.fixture_types import StartEngines

_LISTENING = re.compile(r"Uvicorn running on http://127\.0\.0\.1:(\d+)")
_ADMIN = re.compile(r"admin listener on http://127\.0\.0\.1:(\d+)")


@pytest.fixture
def kvgate_process() -> Iterator[list[subprocess.Popen[str]]]:
    procs: list[subprocess.Popen[str]] = []
    yield procs
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGINT)
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        if p.stderr:
            p.stderr.close()


def _wait_for_port(proc: subprocess.Popen[str], lines: list[str]) -> int:
    assert proc.stderr is not None
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            raise AssertionError(f"kvgate exited early: {''.join(lines)}")
        lines.append(line)
        if m := _LISTENING.search(line):
            return int(m.group(1))
    raise AssertionError("kvgate did not start in 30 s")


def test_kvgate_serve_end_to_end(
    fake_engines: StartEngines, kvgate_process: list[subprocess.Popen[str]]
) -> None:
    (_, s1), (_, s2) = fake_engines(2)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "kvgate.cli",
            "serve",
            "--port",
            "0",
            "--backend",
            s1.url,
            "--backend",
            f"{s2.url},id=second",
            "--policy",
            "round-robin",
        ],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    kvgate_process.append(proc)
    lines: list[str] = []
    port = _wait_for_port(proc, lines)
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as c:
        served = set()
        for i in range(2):
            r = c.post(
                "/v1/chat/completions",
                json={"model": "m1", "messages": [{"role": "user", "content": "secret prompt"}]},
                headers={"x-request-id": f"cli-{i}"},
            )
            assert r.status_code == 200
            served.add(r.headers["x-kvgate-backend"])
        # Opaque by default; /admin/backends maps each tag back to its backend.
        backends = c.get("/admin/backends").json()["backends"]
        ids = {b["backend_header"]: b["id"] for b in backends}
        assert {ids[tag] for tag in served} == {s1.url[7:], "second"}
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=15)
    assert proc.returncode == 0
    access = [
        orjson.loads(line.split("gateway.access [cli-0] ", 1)[1])
        for line in (*lines, *err.splitlines())
        if "gateway.access [cli-0] " in line
    ]
    assert len(access) == 1
    entry = access[0]
    assert entry["request_id"] == "cli-0" and entry["status"] == 200
    assert entry["model"] == "m1" and entry["policy"] == "round-robin"
    assert entry["backend"] in {s1.url[7:], "second"}
    assert "secret prompt" not in err + "".join(lines)


def test_kvgate_serve_rejects_bad_config(tmp_path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("backends:\n  - url: ftp://x\nupstream:\n  max_attempts: 0\n")
    proc = subprocess.run(
        [sys.executable, "-m", "kvgate.cli", "serve", "--config", str(bad)],
        check=False,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 2
    assert "backends.0.url" in proc.stderr and "upstream.max_attempts" in proc.stderr
    assert "Traceback" not in proc.stderr


def _port_flag(argv: list[str]) -> list[str]:
    return [] if argv[-1] == "--admin-port" else ["--port"]


@pytest.mark.parametrize(
    "argv",
    [
        ["emulate", "--replicas", "1"],
        ["serve", "--backend", "http://127.0.0.1:9"],
        ["serve", "--backend", "http://127.0.0.1:9", "--port", "0", "--admin-port"],
    ],
    ids=["emulate", "serve", "serve-admin-port"],
)
def test_busy_port_is_one_line_and_exit_1(argv: list[str]) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = subprocess.run(
            # The busy port last: --port, or --admin-port with the API port free.
            [sys.executable, "-m", "kvgate.cli", *argv, *_port_flag(argv), str(port)],
            check=False,
            capture_output=True,
            text=True,
            timeout=30,
        )
    assert proc.returncode == 1
    assert proc.stderr == f"kvgate: cannot listen on 127.0.0.1:{port}: address already in use\n"
    assert proc.stdout == ""


def test_kvgate_serve_admin_port_and_keys_file_reloaded_on_sighup(
    fake_engines: StartEngines, kvgate_process: list[subprocess.Popen[str]], tmp_path: Path
) -> None:
    """`--admin-port` splits admin and metrics off the API port, in the same process; SIGHUP
    re-reads the keys file (here with an unchanged mtime, which only SIGHUP notices)."""
    [(engine, s1)] = fake_engines(1)
    keys = tmp_path / "keys.yaml"
    keys.write_text(f"- {{name: a, sha256: {hash_key('key-a')}}}\n")
    os.utime(keys, (1000.0, 1000.0))
    config = tmp_path / "kvgate.yaml"
    config.write_text(f"security: {{api_keys_file: {keys}}}\n")
    argv = ["serve", "--port", "0", "--admin-port", "0", "--config", str(config)]
    proc = subprocess.Popen(
        [sys.executable, "-m", "kvgate.cli", *argv, "--backend", s1.url],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    kvgate_process.append(proc)
    lines: list[str] = []
    port = _wait_for_port(proc, lines)
    [admin_port] = [m[1] for line in lines if (m := _ADMIN.search(line))]
    bearer = {"authorization": "Bearer key-b"}
    chat = {"model": "m1", "messages": [{"role": "user", "content": "hi"}]}
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as c:
        assert c.get("/metrics").status_code == 404
        assert c.post("/v1/chat/completions", json=chat, headers=bearer).status_code == 401
        keys.write_text(f"- {{name: b, sha256: {hash_key('key-b')}}}\n")
        os.utime(keys, (1000.0, 1000.0))
        proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 10
        while c.post("/v1/chat/completions", json=chat, headers=bearer).status_code != 200:
            assert time.monotonic() < deadline, "SIGHUP did not reload the keys file"
            time.sleep(0.1)
    with httpx.Client(base_url=f"http://127.0.0.1:{admin_port}", timeout=10) as admin:
        assert "kvgate_requests_total" in admin.get("/metrics").text
        assert admin.get("/admin/backends").json()["backends"][0]["id"] == s1.url[7:]
    assert len(engine.inference_requests()) == 1
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=15)
    assert proc.returncode == 0, err
    assert "Traceback" not in err


def test_kvgate_serve_applies_the_server_limits(
    fake_engines: StartEngines, kvgate_process: list[subprocess.Popen[str]], tmp_path
) -> None:
    ((_, engine),) = fake_engines(1)
    config = tmp_path / "kvgate.yaml"
    config.write_text(
        f"backends:\n  - url: {engine.url}\n"
        "server:\n  header_timeout_s: 0.3\n  idle_timeout_s: 0.3\n  max_headers: 10\n"
    )
    serve = [sys.executable, "-m", "kvgate.cli", "serve", "--port", "0", "--config", str(config)]
    # Under the common soft descriptor limit of 1024 (max_connections unset: derived from it).
    proc = subprocess.Popen(
        ["bash", "-c", 'ulimit -Sn 1024 && exec "$@"', "serve", *serve],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    kvgate_process.append(proc)
    lines: list[str] = []
    port = _wait_for_port(proc, lines)
    assert "client connections capped at 384 (server.max_connections)" in "".join(lines)
    with socket.create_connection(("127.0.0.1", port), timeout=5) as silent:
        assert silent.recv(1024) == b""  # closed by the header timeout
    with socket.create_connection(("127.0.0.1", port), timeout=5) as idle:
        idle.sendall(b"GET /health HTTP/1.1\r\nhost: x\r\n\r\n")
        assert idle.recv(1024).startswith(b"HTTP/1.1 200 ")
        assert idle.recv(1024) == b""  # then by the idle timeout
    many = b"".join(b"x-%d: v\r\n" % i for i in range(11))
    with socket.create_connection(("127.0.0.1", port), timeout=5) as big:
        big.sendall(b"GET /health HTTP/1.1\r\nhost: x\r\n" + many + b"\r\n")
        assert big.recv(4096).startswith(b"HTTP/1.1 431 ")
    page = httpx.get(f"http://127.0.0.1:{port}/metrics").text
    assert "kvgate_server_head_timeouts_total 1.0" in page
    assert "kvgate_server_heads_too_large_total 1.0" in page
    assert "kvgate_server_connections 1.0" in page  # this scrape's
