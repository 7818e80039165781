"""Pod discovery against a fake Kubernetes API speaking the real list/watch protocol."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterator

import pytest

from health.discovery.endpoints import Endpoint, KvEventsSource
from health.discovery.informer import WatchSettings
from health.discovery.kube_api import KubeClient, KubeConnection
from health.discovery.pool_watch import PoolDiscovery
from tests.support.fake_kube import PODS, POOLS, FakeKubeAPI, inference_pool, pod

FAST = WatchSettings(watch_timeout_s=30, backoff_s=0.02, backoff_max_s=0.1)


@pytest.fixture
def api() -> Iterator[FakeKubeAPI]:
    with FakeKubeAPI() as fake:
        yield fake


class Seen:
    """The endpoint sets discovery told, in order."""

    def __init__(self) -> None:
        self.sets: list[frozenset[Endpoint]] = []
        self.changed = asyncio.Event()

    def __call__(self, endpoints: frozenset[Endpoint]) -> None:
        self.sets.append(endpoints)
        self.changed.set()

    @property
    def urls(self) -> set[str]:
        return {e.url for e in self.sets[-1]} if self.sets else set()

    async def until(self, check: Callable[[], bool], timeout_s: float = 5.0) -> None:
        async with asyncio.timeout(timeout_s):
            while not check():
                self.changed.clear()
                await self.changed.wait()


@pytest.fixture
async def discovery(api: FakeKubeAPI) -> AsyncIterator[tuple[PoolDiscovery, Seen]]:
    client = KubeClient(KubeConnection(server=api.url))
    seen = Seen()
    watcher = PoolDiscovery(client, "default", "llm", seen, FAST)
    task = asyncio.create_task(watcher.run())
    yield watcher, seen
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await client.aclose()


async def test_ready_pods_of_the_pool_become_endpoints(
    api: FakeKubeAPI, discovery: tuple[PoolDiscovery, Seen]
) -> None:
    _, seen = discovery
    api.put(POOLS, inference_pool("llm", ports=(8000, 8001)))
    api.put(PODS, pod("a", "10.0.0.1", labels={"app": "llm", "kvgate.dev/engine": "sglang"}))
    api.put(PODS, pod("b", "10.0.0.2", ready=False))
    api.put(PODS, pod("other", "10.0.0.9", labels={"app": "web"}))
    await seen.until(lambda: seen.urls == {"http://10.0.0.1:8000", "http://10.0.0.1:8001"})
    assert {e.engine for e in seen.sets[-1]} == {"sglang"}
    api.put(PODS, pod("b", "10.0.0.2", ready=True))  # becomes ready
    await seen.until(lambda: "http://10.0.0.2:8000" in seen.urls)
    assert {e.engine for e in seen.sets[-1] if e.pod == "b"} == {"vllm"}  # no label: vllm
    api.put(PODS, pod("a", "10.0.0.1", ready=False))  # unready
    await seen.until(lambda: seen.urls == {"http://10.0.0.2:8000", "http://10.0.0.2:8001"})
    api.put(PODS, pod("b", "10.0.0.2", terminating=True))  # terminating: out at once
    await seen.until(lambda: seen.urls == set())
    api.delete(PODS, "b")
    api.put(PODS, pod("c", None, ready=True))  # no IP yet
    api.put(PODS, pod("a", "10.0.0.1"))
    await seen.until(lambda: seen.urls == {"http://10.0.0.1:8000", "http://10.0.0.1:8001"})
    api.delete(PODS, "a")
    await seen.until(lambda: seen.urls == set())
    assert api.lists(PODS) == 1  # all of it over one watch, no re-list


async def test_a_selector_change_watches_the_newly_selected_pods(
    api: FakeKubeAPI, discovery: tuple[PoolDiscovery, Seen]
) -> None:
    _, seen = discovery
    api.put(PODS, pod("a", "10.0.0.1", labels={"app": "llm"}))
    api.put(PODS, pod("b", "10.0.0.2", labels={"app": "llm-v2"}))
    api.put(POOLS, inference_pool("llm", selector={"app": "llm"}))
    await seen.until(lambda: seen.urls == {"http://10.0.0.1:8000"})
    api.put(POOLS, inference_pool("llm", selector={"app": "llm-v2"}, ports=(9000,)))
    await seen.until(lambda: seen.urls == {"http://10.0.0.2:9000"})
    api.put(PODS, pod("c", "10.0.0.3", labels={"app": "llm-v2"}))
    await seen.until(lambda: seen.urls == {"http://10.0.0.2:9000", "http://10.0.0.3:9000"})
    api.delete(POOLS, "llm")  # no pool, no endpoints
    await seen.until(lambda: seen.urls == set())


async def test_gone_watches_list_again_and_bookmarks_move_the_version(
    api: FakeKubeAPI, discovery: tuple[PoolDiscovery, Seen]
) -> None:
    _, seen = discovery
    api.put(POOLS, inference_pool("llm"))
    api.put(PODS, pod("a", "10.0.0.1"))
    await seen.until(lambda: seen.urls == {"http://10.0.0.1:8000"})
    await asyncio.to_thread(api.wait_watching, PODS)
    # A change the pod watch does not see moves the version; a bookmark tells it.
    version = api.put(POOLS, inference_pool("llm"))
    api.bookmark()
    await asyncio.sleep(0.05)
    api.end_watches()  # the server's timeout: watch again from the last version, no list
    api.put(PODS, pod("b", "10.0.0.2"))
    await seen.until(lambda: "http://10.0.0.2:8000" in seen.urls)
    assert api.lists(PODS) == 1
    pod_watches = [q for path, q in api.requests if path.endswith(PODS) and "watch" in q]
    assert [q["resourceVersion"] for q in pod_watches][1] == str(version)
    assert all(q["allowWatchBookmarks"] == "true" for q in pod_watches)
    # History compacted and watches told 410: re-list, and see what changed meanwhile.
    await asyncio.to_thread(api.wait_watching, PODS)
    api.compact()
    api.end_watches(gone=True)
    api.delete(PODS, "a")
    await seen.until(lambda: seen.urls == {"http://10.0.0.2:8000"})
    assert api.lists(PODS) >= 2


async def test_a_reset_connection_backs_off_and_lists_again(
    api: FakeKubeAPI, discovery: tuple[PoolDiscovery, Seen]
) -> None:
    _, seen = discovery
    api.put(POOLS, inference_pool("llm"))
    api.put(PODS, pod("a", "10.0.0.1"))
    await seen.until(lambda: seen.urls == {"http://10.0.0.1:8000"})
    await asyncio.to_thread(api.wait_watching, PODS)
    api.reset_watches()
    api.put(PODS, pod("b", "10.0.0.2"))
    await seen.until(lambda: seen.urls == {"http://10.0.0.1:8000", "http://10.0.0.2:8000"})
    assert api.lists(PODS) == 2  # after the reset: list again, then watch


async def test_a_watch_from_a_compacted_version_gets_410_and_lists_again(
    api: FakeKubeAPI,
) -> None:
    from health.discovery.kube_api import GoneError

    api.put(PODS, pod("a"))
    client = KubeClient(KubeConnection(server=api.url))
    try:
        _, version = await client.list("/api/v1/namespaces/default/pods", {})
        api.put(PODS, pod("b"))
        api.compact()
        with pytest.raises(GoneError):
            async for _ in client.watch("/api/v1/namespaces/default/pods", {}, version, 5):
                pass
    finally:
        await client.aclose()


async def test_an_unreachable_api_is_retried_with_backoff(api: FakeKubeAPI) -> None:
    api.put(POOLS, inference_pool("llm"))
    api.put(PODS, pod("a", "10.0.0.1"))
    client = KubeClient(KubeConnection(server=api.url + "/nowhere"))  # 404 on every path
    seen = Seen()
    task = asyncio.create_task(PoolDiscovery(client, "default", "llm", seen, FAST).run())
    await asyncio.sleep(0.3)
    assert seen.sets == []
    fails = len(api.requests)
    assert 2 <= fails <= 10  # backoff 0.02, 0.04, 0.08, 0.1 ...: a few tries, not a spin
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await client.aclose()


async def test_kv_event_annotations_follow_the_pod_and_bad_ones_warn_once(
    api: FakeKubeAPI, discovery: tuple[PoolDiscovery, Seen], caplog: pytest.LogCaptureFixture
) -> None:
    _, seen = discovery
    api.put(POOLS, inference_pool("llm", ports=(8000, 8001)))
    notes = {"kvgate.dev/kv-events-port": "5557", "kvgate.dev/kv-events-replay-port": "6000"}
    api.put(PODS, pod("a", "10.0.0.1", annotations=notes))
    await seen.until(lambda: len(seen.urls) == 2)
    assert {(e.url, e.kv_events) for e in seen.sets[-1]} == {
        ("http://10.0.0.1:8000", KvEventsSource("tcp://10.0.0.1:5557", "tcp://10.0.0.1:6000")),
        ("http://10.0.0.1:8001", KvEventsSource("tcp://10.0.0.1:5558", "tcp://10.0.0.1:6001")),
    }
    api.put(PODS, pod("a", "10.0.0.1", annotations={"kvgate.dev/kv-events-port": "none"}))
    await seen.until(lambda: all(e.kv_events is None for e in seen.sets[-1]))
    for i in range(3):  # every change re-reads every pod: the warning is not repeated
        api.put(PODS, pod(f"b{i}", f"10.0.1.{i}"))
    await seen.until(lambda: len(seen.urls) == 8)
    warned = [r for r in caplog.records if "kv-events-port" in r.getMessage()]
    assert len(warned) == 1 and "pod default/a" in warned[0].getMessage()


async def test_synced_once_the_pool_is_found_and_its_pods_listed(
    api: FakeKubeAPI, discovery: tuple[PoolDiscovery, Seen]
) -> None:
    watcher, seen = discovery

    async def until_synced(want: bool) -> None:
        async with asyncio.timeout(5.0):
            while watcher.synced != want:  # noqa: ASYNC110 (the endpoints told may not change)
                await asyncio.sleep(0.01)

    await seen.until(lambda: len(seen.sets) == 1)  # the pool listed: not there
    assert not watcher.synced
    api.put(POOLS, inference_pool("llm", ports=(8000,)))
    await until_synced(True)  # no pod: synced all the same (the picker answers 503)
    assert seen.urls == set()
    api.delete(POOLS, "llm")
    await until_synced(False)
