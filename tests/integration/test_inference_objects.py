"""The pool's InferenceObjectives and InferenceModelRewrites watched through a fake Kubernetes
API speaking the real list/watch protocol: tables follow the objects, a group the cluster does
not serve is waited for quietly."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Iterator

import pytest

from health.discovery.inference_objects import ObjectWatch
from health.discovery.informer import WatchSettings
from health.discovery.kube_api import KubeClient, KubeConnection
from routing.admission.objectives import Objectives
from routing.model_rewrite import ModelRewrites
from tests.support.fake_kube import (
    OBJECTIVES,
    REWRITES,
    FakeKubeAPI,
    inference_objective,
    model_rewrite,
)
from tests.support.waiting import async_wait_until

FAST = WatchSettings(watch_timeout_s=30, backoff_s=0.02, backoff_max_s=0.1)


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
