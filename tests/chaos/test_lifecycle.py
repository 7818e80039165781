"""The gateway's life: bad config files refused up front, and a graceful drain on SIGTERM."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from sim.live.processes import kvgate_command
from tests.chaos.checks import chat
from tests.chaos.conftest import StartGateway
from tests.chaos.load import judge_stream
from tests.support.fixture_types import StartEngines
from tests.support.gateway_process import gateway_config

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(120)]

BAD_CONFIGS = {
    "port_out_of_range": ("backends:\n  - url: http://127.0.0.1:99999\n", "backends.0.url"),
    "duplicate_yaml_key": (
        "routing:\n  policy: round-robin\n  policy: session\n"
        "backends:\n  - url: http://127.0.0.1:8001\n",
        "policy",
    ),
    "duplicate_backend_id": (
        "backends:\n  - url: http://127.0.0.1:8001\n    id: a\n"
        "  - url: http://127.0.0.1:8002\n    id: a\n",
        "backends",  # not under `routing:`, where it used to be reported
    ),
}


@pytest.mark.parametrize("name", sorted(BAD_CONFIGS))
def test_bad_config_is_refused(tmp_path: Path, name: str) -> None:
    text, names = BAD_CONFIGS[name]
    path = tmp_path / f"{name}.yaml"
    path.write_text(text)
    proc = subprocess.run(
        kvgate_command("check-config", str(path)),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2, f"{name}: check-config exited {proc.returncode}; want 2"
    assert names in proc.stderr, f"{name}: the error should name {names!r}: {proc.stderr}"
    assert "Traceback" not in proc.stderr


def test_sigterm_drains(
    gateway: StartGateway, fake_engines: StartEngines, figures: Callable[..., None]
) -> None:
    [(_, server)] = fake_engines(1, tokens=120, token_delay=0.05)  # 6 s streams
    drain = {"drain_delay_s": 2.0, "shutdown_grace_s": 2.0}
    gw = gateway(gateway_config([server.url], server=drain))
    marks: dict[str, float] = {}

    async def stream(client: httpx.AsyncClient) -> bytes:
        body = b""
        body_json = {"model": "m1", "messages": [{"role": "user", "content": "hi"}], "stream": True}
        try:
            async with client.stream("POST", "/v1/chat/completions", json=body_json) as resp:
                async for part in resp.aiter_raw():
                    body += part
        except httpx.HTTPError:
            pass
        return body

    async def run() -> tuple[list[bytes], httpx.Response | None, httpx.Response | None]:
        async with httpx.AsyncClient(base_url=gw.url, timeout=30.0) as client:
            streams = [asyncio.create_task(stream(client)) for _ in range(4)]
            await asyncio.sleep(0.5)
            gw_pid_signal(gw.pid)
            marks["sigterm"] = time.monotonic()
            await asyncio.sleep(0.2)
            ready = await asyncio.to_thread(_answer, lambda: httpx.get(gw.url + "/ready"))
            short = {
                "model": "m1",
                "messages": [{"role": "user", "content": "hi"}],
                "max_tokens": 2,
            }
            served = await asyncio.to_thread(_answer, lambda: chat(gw, json=short))
            return await asyncio.gather(*streams), served, ready

    bodies, served, ready = asyncio.run(run())
    exited = _wait_exit(gw.pid, 15.0)
    verdicts = [judge_stream(b) for b in bodies]
    good = [v for v in verdicts if v.done or (v.well_formed and v.error_event)]
    figures(
        ready_while_draining=ready.status_code if ready else None,
        streams_ended_well=f"{len(good)}/{len(verdicts)}",
        exit_s=round(exited - marks["sigterm"], 2) if exited else None,
    )
    assert ready is not None and ready.status_code == 503, f"/ready while draining: {ready}"
    assert ready.json().get("draining") is True, f"/ready while draining: {ready.text}"
    status = served.status_code if served else None
    assert status == 200, f"a request during the drain delay was not served: {status}"
    assert len(good) == len(verdicts), f"streams cut badly by the shutdown: {verdicts}"
    assert exited is not None, "the gateway did not exit within drain + grace + 12 s"


def gw_pid_signal(pid: int) -> None:
    os.kill(pid, signal.SIGTERM)


def _answer(call: Callable[[], httpx.Response]) -> httpx.Response | None:
    try:
        return call()
    except httpx.HTTPError:
        return None  # refused: the listener is already closed


def _wait_exit(pid: int, within: float) -> float | None:
    """When /proc/<pid> went away (or turned zombie), None if not within ``within`` s."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0]
        except (OSError, IndexError):
            return time.monotonic()
        if state == "Z":
            return time.monotonic()
        time.sleep(0.05)
    return None
