"""`kvgate serve` on SIGTERM: not ready first, serving through the drain delay, streams
finished within the grace or ended with an SSE error event, exit 0 (issue 15, Build 4)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import orjson
import pytest
import yaml

from tests.support.fixture_types import StartEngines
from tests.support.waiting import wait_until

pytestmark = pytest.mark.timeout(60)
_LISTENING = re.compile(r"Uvicorn running on http://127\.0\.0\.1:(\d+)")
CHAT = {"model": "m1", "stream": True, "messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[list[subprocess.Popen[str]]]:
    procs: list[subprocess.Popen[str]] = []
    yield procs
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()
        if p.stderr:
            p.stderr.close()


def _start(
    procs: list[subprocess.Popen[str]], tmp_path: Path, url: str, server: dict[str, float]
) -> int:
    config = tmp_path / "kvgate.yaml"
    config.write_text(yaml.safe_dump({"backends": [{"url": url}], "server": server}))
    proc = subprocess.Popen(
        [sys.executable, "-m", "kvgate.cli", "serve", "--port", "0", "--config", str(config)],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    procs.append(proc)
    assert proc.stderr is not None
    while line := proc.stderr.readline():
        if m := _LISTENING.search(line):
            return int(m.group(1))
    raise AssertionError("kvgate exited before listening")


def _events(lines: Iterator[str]) -> Iterator[str]:
    return (line.removeprefix("data: ") for line in lines if line.startswith("data: "))


def test_sigterm_drains_then_lets_the_stream_finish(
    fake_engines: StartEngines, gateway: list[subprocess.Popen[str]], tmp_path: Path
) -> None:
    ((_, engine),) = fake_engines(1, tokens=12, token_delay=0.15)
    port = _start(gateway, tmp_path, engine.url, {"drain_delay_s": 1.0, "shutdown_grace_s": 20})
    proc = gateway[0]
    base = f"http://127.0.0.1:{port}"
    with httpx.Client(base_url=base, timeout=10) as c:
        assert c.get("/ready").json()["draining"] is False
        with c.stream("POST", "/v1/chat/completions", json=CHAT) as stream:
            events = _events(stream.iter_lines())
            next(events)
            proc.send_signal(signal.SIGTERM)
            time.sleep(0.2)
            with httpx.Client(base_url=base, timeout=5) as other:  # a new connection
                ready = other.get("/ready")
                served = other.post("/v1/chat/completions", json={**CHAT, "stream": False})
            rest = list(events)
    assert ready.status_code == 503 and ready.json()["draining"] is True
    assert served.status_code == 200  # still serving during the delay
    assert served.headers["connection"] == "close"  # and moving keep-alive clients off
    assert rest[-1] == "[DONE]" and not any('"error"' in e for e in rest)
    assert proc.wait(timeout=20) == 0
    assert proc.stderr is not None and "Traceback" not in proc.stderr.read()
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{base}/health")


def test_streams_left_after_the_grace_end_with_an_error_event(
    fake_engines: StartEngines, gateway: list[subprocess.Popen[str]], tmp_path: Path
) -> None:
    ((engine_state, engine),) = fake_engines(1, tokens=400, token_delay=0.1)
    port = _start(gateway, tmp_path, engine.url, {"drain_delay_s": 0.2, "shutdown_grace_s": 1})
    proc = gateway[0]
    with (
        httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as c,
        c.stream("POST", "/v1/chat/completions", json=CHAT) as stream,
    ):
        events = _events(stream.iter_lines())
        next(events)
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        rest = list(events)  # the body ends cleanly: httpx raises on a cut chunked stream
    ended_after = time.monotonic() - started
    assert orjson.loads(rest[-1])["error"]["code"] == "gateway_shutting_down"
    assert all('"error"' not in e for e in rest[:-1])
    assert 1.0 <= ended_after < 10
    assert proc.wait(timeout=20) == 0
    assert proc.stderr is not None and "Traceback" not in proc.stderr.read()
    wait_until(lambda: engine_state.cancelled == 1)  # the engine was told to stop generating
