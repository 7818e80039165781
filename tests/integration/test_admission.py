"""Admission control end to end: the gateway under uvicorn in front of emulated engines."""

from __future__ import annotations

import asyncio

import httpx
import orjson
import pytest

from gateway.app import build_app
from gateway.auth import hash_key
from routing.config.schema import parse_config
from sim.emulator.app import EmulatorApp
from sim.emulator.replica import Replica
from sim.engine.tokenizer import BuiltinTokenizer
from sim.engine.types import EngineConfig, EngineProfile, StepTimeCoefficients
from tests.integration.conftest import FAST_HEALTH, StartGateway
from tests.support.fixture_types import ServeApp
from tests.support.servers import ServerThread
from tests.support.waiting import async_wait_until

MODEL = "emu"
# Slow steps, so a request holds its place for a few tenths of a second.
TIMING = StepTimeCoefficients(
    overhead_s=0.02, prefill_token_s=0.0, attention_s=0.0, decode_seq_s=0.0, kv_read_token_s=0.0
)
CONFIG = EngineConfig(
    block_size=16, num_blocks=512, max_num_seqs=8, max_num_batched_tokens=4096, max_model_len=4096
)


@pytest.fixture
def replicas(serve_app: ServeApp) -> list[str]:
    profile = EngineProfile("test", "slow steps", "tests", CONFIG, TIMING)
    servers = [
        serve_app(EmulatorApp(Replica(profile, MODEL), BuiltinTokenizer()), lifespan="on")
        for _ in range(2)
    ]
    return [s.url for s in servers]


async def _complete(client: httpx.AsyncClient, tokens: int = 15) -> httpx.Response:
    body = {"model": MODEL, "prompt": "hello there", "max_tokens": tokens, "stream": True}
    async with client.stream("POST", "/v1/completions", json=body) as r:
        await r.aread()
        return r


def _metric(text: str, name: str) -> float:
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name))


async def test_a_burst_over_capacity_is_shed_with_429_and_the_admitted_succeed(
    replicas: list[str], start_gateway: StartGateway
) -> None:
    admission = {"max_in_flight_per_backend": 2, "max_queue": 2, "queue_timeout_s": 20}
    app, gw = start_gateway(replicas, admission=admission)
    async with httpx.AsyncClient(base_url=gw.url, timeout=30) as client:
        answers = await asyncio.gather(*(_complete(client) for _ in range(40)))  # 10x of 4
        await async_wait_until(lambda: app.runtime.admission.admitted == 0)  # every place came back
        metrics = (await client.get("/metrics")).text
        state = (await client.get("/admin/backends")).json()["admission"]
    assert state["admitted"] == 0 and state["queue"] == {
        "critical": 0,
        "standard": 0,
        "sheddable": 0,
    }
    assert state["mean_service_s"] > 0
    ok = [r for r in answers if r.status_code == 200]
    shed = [r for r in answers if r.status_code == 429]
    assert len(ok) + len(shed) == 40
    assert len(ok) >= 4 and len(shed) >= 20
    for r in ok:
        assert b"data: [DONE]" in r.content
    for r in shed:
        assert int(r.headers["retry-after"]) >= 1
        error = orjson.loads(r.content)["error"]
        assert (error["type"], error["code"]) == ("rate_limit_exceeded", "overloaded")
    full = _metric(metrics, 'kvgate_admission_shed_total{reason="queue_full"}')
    too_long = _metric(metrics, 'kvgate_admission_shed_total{reason="wait_too_long"}')
    assert full + too_long == len(shed)
    assert _metric(metrics, "kvgate_admission_admitted_requests") == 0


async def test_a_key_over_its_request_limit_gets_openai_rate_limit_headers(
    replicas: list[str], serve_app: ServeApp, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KVGATE_API_KEYS", raising=False)
    key = {"name": "team-a", "sha256": hash_key("key-a"), "requests_per_minute": 2}
    raw = {
        "backends": [{"url": u} for u in replicas],
        "health": FAST_HEALTH,
        "security": {"api_keys": [key]},
    }
    front: ServerThread = serve_app(build_app(parse_config(raw)), lifespan="on")
    bearer = {"authorization": "Bearer key-a"}
    async with httpx.AsyncClient(base_url=front.url, timeout=30, headers=bearer) as client:
        statuses = [(await _complete(client, 2)).status_code for _ in range(2)]
        refused = await _complete(client, 2)
    assert statuses == [200, 200]
    assert refused.status_code == 429
    assert orjson.loads(refused.content)["error"]["type"] == "requests"
    assert refused.headers["x-ratelimit-limit-requests"] == "2"
    assert refused.headers["x-ratelimit-remaining-requests"] == "0"
    assert 1 <= int(refused.headers["retry-after"]) <= 30


async def test_a_client_leaving_the_queue_is_recorded_499_and_frees_its_place(
    replicas: list[str], start_gateway: StartGateway
) -> None:
    admission = {"max_in_flight_per_backend": 1, "queue_timeout_s": 20}
    app, gw = start_gateway(replicas[:1], admission=admission)
    async with httpx.AsyncClient(base_url=gw.url, timeout=30) as client:
        holder = asyncio.ensure_future(_complete(client, 40))
        await async_wait_until(lambda: app.runtime.admission.admitted == 1)
        leaver = asyncio.ensure_future(_complete(client, 2))
        await async_wait_until(lambda: len(app.runtime.admission.queue) == 1)
        leaver.cancel()
        await async_wait_until(lambda: len(app.runtime.admission.queue) == 0)
        assert (await holder).status_code == 200
        metrics = (await client.get("/metrics")).text
    assert _metric(metrics, 'kvgate_requests_total{backend="none",model="emu",status="499"}') == 1
    assert _metric(metrics, "kvgate_admission_cancelled_total") == 1
