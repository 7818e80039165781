"""Changing a running `kvgate serve`'s pool and config under continuous load (issue 18, part 4):
a backend added and another removed through the admin API, then the config file reloaded on
SIGHUP (backends and policy changed), then a bad file rejected, with zero failed requests.

The gateway is a real process; the engines are emulated replicas (`sim.emulator`, the demo
profile) on uvicorn servers in this process; six clients, half streaming, send requests back
to back the whole time. Each test prints its figures (run with `-s` to see them).
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from gateway.auth import hash_key
from sim.emulator.app import EmulatorApp
from sim.emulator.replica import Replica
from sim.engine.profiles import get_profile
from sim.engine.tokenizer import BuiltinTokenizer
from tests.support.fixture_types import ServeApp
from tests.support.gateway_process import GatewayProcess, gateway_config
from tests.support.load import ContinuousLoad, share
from tests.support.servers import ServerThread

pytestmark = pytest.mark.timeout(90)
MODEL = "emu"
PHASE_S = 1.5  # load before, between and after the changes
ADMIN = {"authorization": "Bearer adm"}  # the admin key: changes go through the credential
SECURITY = {"backend_header": "id", "admin_key_sha256": hash_key("adm")}

StartReplicas = Callable[[int], list[ServerThread]]


@pytest.fixture
def replicas(serve_app: ServeApp) -> StartReplicas:
    def start(n: int) -> list[ServerThread]:
        profile = get_profile("demo")
        return [
            serve_app(EmulatorApp(Replica(profile, MODEL, speedup=2.0), BuiltinTokenizer()))
            for _ in range(n)
        ]

    return start


@pytest.fixture
def gateways(tmp_path: Path) -> Any:
    started: list[GatewayProcess] = []

    def start(config: dict[str, Any]) -> GatewayProcess:
        gw = GatewayProcess(config, tmp_path / f"gw{len(started)}")
        started.append(gw)
        return gw.start()

    yield start
    for gw in started:
        gw.stop()


def _config(backends: dict[str, str], **sections: Any) -> dict[str, Any]:
    config = gateway_config([], security=SECURITY, **sections)
    config["backends"] = [{"url": url, "id": name} for name, url in backends.items()]
    return config


async def _backends(admin: httpx.AsyncClient) -> dict[str, dict[str, Any]]:
    answer = await admin.get("/admin/backends")
    answer.raise_for_status()
    return {b["id"]: b for b in answer.json()["backends"]}


async def _healthy(admin: httpx.AsyncClient, backend_id: str) -> bool:
    entry = (await _backends(admin)).get(backend_id)
    return entry is not None and entry["health"] == "healthy" and not entry["draining"]


async def _poll(check: Callable[[], Any], within: float = 10.0) -> None:
    deadline = time.monotonic() + within
    while not await check():
        assert time.monotonic() < deadline, "condition still false"
        await asyncio.sleep(0.05)


def _report(name: str, load: ContinuousLoad, **figures: object) -> None:
    failed = load.failed()
    shown = ", ".join(f"{k} {v}" for k, v in figures.items())
    print(f"\n{name}: {len(load.results)} requests, {len(failed)} failed; {shown}")
    for r in failed[:5]:
        print("  failed:", r)


async def test_a_backend_added_and_another_removed_under_load(
    replicas: StartReplicas, gateways: Callable[[dict[str, Any]], GatewayProcess]
) -> None:
    a, b, c = replicas(3)
    gw = gateways(_config({"a": a.url, "b": b.url}))
    async with (
        httpx.AsyncClient(base_url=gw.url, headers=ADMIN, timeout=10.0) as admin,
        ContinuousLoad(gw.url, MODEL, clients=6) as load,
    ):
        await asyncio.sleep(PHASE_S)
        entry = {"url": c.url, "id": "c"}
        async with httpx.AsyncClient(base_url=gw.url) as anonymous:
            assert (await anonymous.post("/admin/backends", json=entry)).status_code == 401
        added = await admin.post("/admin/backends", json=entry)
        assert added.status_code == 201, added.text
        await _poll(lambda: _healthy(admin, "c"))
        c_in = time.monotonic()
        await asyncio.sleep(PHASE_S)
        drained = time.monotonic()
        removed = await admin.delete("/admin/backends/b")  # busy: drained, then removed
        assert removed.status_code in (200, 202), removed.text
        await _poll(lambda: _absent(admin, "b"))
        b_out = time.monotonic()
        b.stop()  # nobody may still be using it
        await asyncio.sleep(PHASE_S)
    with_three = [r for r in load.started_after(c_in) if r.started < drained]
    after_b = load.started_after(b_out)
    _report(
        "add c, remove b",
        load,
        reaching_c=f"{share(with_three, 'c'):.0%} of {len(with_three)} sent while a, b, c "
        f"served, {share(after_b, 'c'):.0%} of {len(after_b)} once b had left",
        reaching_b=f"{share(after_b, 'b'):.0%} once it had left",
        removal=removed.status_code,
    )
    assert load.failed() == []
    assert len(load.results) >= 60  # several seconds of six clients: real traffic
    assert share(with_three, "c") >= 0.2  # round-robin: a third
    assert share(after_b, "c") >= 0.3  # and half once b left
    assert share(after_b, "b") == 0
    assert {r.backend for r in after_b} == {"a", "c"}


async def _absent(admin: httpx.AsyncClient, backend_id: str) -> bool:
    return backend_id not in await _backends(admin)


async def test_sighup_reloads_backends_and_policy_under_load_and_a_bad_file_is_rejected(
    replicas: StartReplicas, gateways: Callable[[dict[str, Any]], GatewayProcess]
) -> None:
    a, b, c = replicas(3)
    gw = gateways(_config({"a": a.url, "b": b.url}))
    path = gw.config_path
    async with (
        httpx.AsyncClient(base_url=gw.url, headers=ADMIN, timeout=10.0) as admin,
        ContinuousLoad(gw.url, MODEL, clients=6) as load,
    ):
        await asyncio.sleep(PHASE_S)
        reloaded = _config({"a": a.url, "c": c.url}, routing={"policy": "least-load"})
        _write(path, reloaded)
        gw.send_signal(signal.SIGHUP)
        await _poll(lambda: _absent(admin, "b"))
        await _poll(lambda: _healthy(admin, "c"))
        switched = time.monotonic()
        assert await _policy(admin) == "least-load"
        await asyncio.sleep(PHASE_S)
        bad = _config({"a": a.url}, routing={"policy": "no-such-policy"})
        _write(path, bad)
        gw.send_signal(signal.SIGHUP)
        await _poll_log(gw, "config reload (SIGHUP) rejected")
        await asyncio.sleep(PHASE_S)
    after = load.started_after(switched)
    _report(
        "SIGHUP reload",
        load,
        reaching_c=f"{share(after, 'c'):.0%} of {len(after)} sent after the reload",
        reaching_b=f"{share(after, 'b'):.0%}",
    )
    assert load.failed() == []
    assert share(after, "b") == 0
    assert share(after, "c") > 0
    assert set(await _ids(gw)) == {"a", "c"}  # the bad file changed nothing
    line = next(x for x in gw.log_text().splitlines() if "rejected" in x)
    assert "routing.policy" in line
    async with httpx.AsyncClient(base_url=gw.url, headers=ADMIN) as admin:
        assert await _policy(admin) == "least-load"


def _write(path: Path, config: dict[str, Any]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(yaml.safe_dump(config))
    tmp.replace(path)  # whole, as an operator's tooling should


async def _policy(admin: httpx.AsyncClient) -> str:
    body = {"model": MODEL, "messages": [{"role": "user", "content": "which policy?"}]}
    answer = await admin.post("/admin/route", json=body)
    answer.raise_for_status()
    policy: str = answer.json()["decision"]["policy"]
    return policy


async def _ids(gw: GatewayProcess) -> list[str]:
    async with httpx.AsyncClient(base_url=gw.url, headers=ADMIN) as admin:
        return list(await _backends(admin))


async def _poll_log(gw: GatewayProcess, text: str, within: float = 10.0) -> None:
    async def found() -> bool:
        return text in gw.log_text()

    await _poll(found, within)
