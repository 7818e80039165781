"""The documented commands run as written: the emulator-based getting-started page and the
README's quick start, extracted from their fenced blocks and run by bash in order.

A block preceded by `<!-- docs-test: background -->` is a server started in the background
(waited for: its ports accept connections, a gateway's `/ready` answers 200) and stopped at
the end; `<!-- docs-test: run -->` is run and must exit 0. Ports 8000-8002 of the text become
free ports, consecutive where the emulator needs them; `kvgate` is this interpreter's; the
blocks run in a scratch directory where `traces/` is the repository's.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import orjson
import pytest

from sim.live.processes import free_port

REPO = Path(__file__).resolve().parents[2]
PAGES = (REPO / "docs" / "getting-started" / "emulator.md", REPO / "README.md")
BLOCK = re.compile(r"<!-- docs-test: (background|run) -->\s*\n```(?:sh|bash)\n(.*?)\n```", re.S)
DOCUMENTED_PORTS = re.compile(r"\b800[012]\b")


@dataclass(frozen=True, slots=True)
class Block:
    mode: str  # background | run
    script: str


def blocks(page: Path) -> list[Block]:
    return [Block(m.group(1), m.group(2)) for m in BLOCK.finditer(page.read_text("utf-8"))]


def test_the_pages_have_tagged_blocks() -> None:
    for page in PAGES:
        modes = [b.mode for b in blocks(page)]
        assert modes.count("background") == 2 and "run" in modes, page.name


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_the_documented_commands_run(page: Path, tmp_path: Path) -> None:
    ports = _ports()
    shim = tmp_path / "bin" / "kvgate"
    shim.parent.mkdir()
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m kvgate.cli "$@"\n')
    shim.chmod(0o755)
    env = {**os.environ, "PATH": f"{shim.parent}{os.pathsep}{os.environ['PATH']}"}
    work = tmp_path / "work"
    work.mkdir()
    (work / "traces").symlink_to(REPO / "traces")
    outputs: list[str] = []
    with _servers() as start:
        for block in blocks(page):
            script = DOCUMENTED_PORTS.sub(lambda m: str(ports[int(m.group()) - 8000]), block.script)
            if block.mode == "background":
                start(script, env, work, tmp_path / f"server{len(outputs)}.log")
                _wait_for(script)
                outputs.append("")
                continue
            done = subprocess.run(
                ["bash", "-o", "pipefail", "-c", script],
                cwd=work,
                env=env,
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
            assert done.returncode == 0, f"{script}\n{done.stdout}\n{done.stderr}"
            outputs.append(done.stdout)
    _check(page, [o for o in outputs if o])


def _check(page: Path, outputs: list[str]) -> None:
    chats = [o for o in outputs if '"chat.completion"' in o]
    assert chats and all(orjson.loads(o)["choices"][0]["message"]["content"] for o in chats)
    if page.name == "README.md":
        [sim] = [o for o in outputs if "goodput" in o]
        assert all(p in sim for p in ("round-robin", "least-load", "prefix-aware", "oracle"))
        return
    ready, _chat, affinity, route, metrics = outputs
    assert orjson.loads(ready)["ready"] is True
    backends = re.findall(r"x-kvgate-backend: (\w+)", affinity)
    cached = [int(n) for n in re.findall(r'"cached_tokens":(\d+)', affinity)]
    assert len(backends) == 3 and len(set(backends)) == 1, affinity  # one replica, three times
    assert len(cached) == 3 and cached[2] > 0, affinity  # its cache held the prompt
    assert orjson.loads(route)["decision"]["reason"] == "prefix", route
    assert "kvgate_routing_decisions_total" in metrics
    assert "kvgate_observed_cache_hit_tokens_total" in metrics


def _ports() -> list[int]:
    """Free ports for 8000, 8001 and 8002, the last two consecutive (emulated replicas)."""
    for _ in range(50):
        base = free_port()
        if base < 65535 and _free(base + 1):
            return [free_port(), base, base + 1]
    raise RuntimeError("no two consecutive free ports")


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


class _Start:
    def __init__(self) -> None:
        self.procs: list[subprocess.Popen[bytes]] = []

    def __call__(self, script: str, env: dict[str, str], cwd: Path, log: Path) -> None:
        with log.open("wb") as out:
            self.procs.append(
                subprocess.Popen(
                    ["bash", "-c", script],
                    cwd=cwd,
                    env=env,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,  # its own process group: stopped whole
                )
            )


@contextmanager
def _servers() -> Iterator[_Start]:
    start = _Start()
    try:
        yield start
    finally:
        for proc in reversed(start.procs):
            _stop(proc)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl+C: the gateway skips its drain delay
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


def _wait_for(script: str, within: float = 20.0) -> None:
    """Until the command's ports accept connections; a gateway's also until it is ready."""
    port = int(re.search(r"--port (\d+)", script).group(1))  # type: ignore[union-attr]
    replicas = re.search(r"--replicas (\d+)", script)
    deadline = time.monotonic() + within
    for p in range(port, port + (int(replicas.group(1)) if replicas else 1)):
        while not _accepts(p):
            assert time.monotonic() < deadline, f"nothing listens on {p}: {script}"
            time.sleep(0.1)
    if " serve " in f" {script} ":
        while httpx.get(f"http://127.0.0.1:{port}/ready", timeout=2).status_code != 200:
            assert time.monotonic() < deadline, f"the gateway on {port} is not ready"
            time.sleep(0.1)


def _accepts(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
    except OSError:
        return False
    return True
