"""A discovered pod's KV events: the gateway follows the publisher its annotations name, from
the moment the pod joins the pool until it leaves, without a restart.

`kvgate emulate --kv-events-port 0` stands for the pod's vLLM; a fake Kubernetes API reports
it (pod IP 127.0.0.1, `kvgate.dev/kv-events-port` and `-replay-port` annotations); the
gateway runs in-process under uvicorn so the test can read its precise index.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import msgpack  # type: ignore[import-untyped]
import pytest
import zmq
import zmq.asyncio

from adapters.kv_events import KvEventBatch
from gateway.kv_event_loops import source_settings
from health.discovery.endpoints import KV_EVENTS_PORT, KV_EVENTS_REPLAY_PORT, kv_events_sources
from health.kv_events import KvEventSubscriber
from sim.live.processes import start_emulator
from sim.workloads import synth_text
from tests.integration.conftest import StartGateway
from tests.support.fake_kube import PODS, POOLS, FakeKubeAPI, inference_pool, pod
from tests.support.waiting import wait_until

MODEL = "emu"


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[tuple[str, int, int]]:
    """The emulated engine: its URL, KV-event publisher port and replay port."""
    extra = ["--kv-events-port", "0"]
    child, [url] = start_emulator(1, "demo", MODEL, tmp_path / "emu.log", speedup=50, extra=extra)
    with child:
        [m] = child.wait_for_line(r"^replica 0 kv-events: (\S+) replay (\S+)")
        yield url, urlsplit(m.group(1)).port or 0, urlsplit(m.group(2)).port or 0


def _complete(base_url: str, n: int, seed: int = 0) -> None:
    with httpx.Client(base_url=base_url, timeout=30.0) as http:
        for i in range(n):
            body = {"model": MODEL, "prompt": synth_text(random.Random(seed + i), 300)}
            http.post("/v1/completions", json=body | {"max_tokens": 2}).raise_for_status()


def test_a_discovered_pods_events_feed_the_index_until_the_pod_leaves(
    engine: tuple[str, int, int],
    start_gateway: StartGateway,
    client: Callable[..., httpx.Client],
) -> None:
    url, port, replay_port = engine
    address = urlsplit(url)
    backend_id, loop = address.netloc, f"kv-events:{address.netloc}"
    notes = {KV_EVENTS_PORT: str(port), KV_EVENTS_REPLAY_PORT: str(replay_port)}
    with FakeKubeAPI() as api:
        api.put(POOLS, inference_pool("llm", ports=(address.port or 0,)))
        api.put(PODS, pod("vllm-0", address.hostname, ready=False, annotations=notes))
        app, gw = start_gateway([], discovery={"pool": "llm", "kube_api": api.url})
        http = client(gw)
        assert loop not in http.get("/ready").json()["loops"]

        api.put(PODS, pod("vllm-0", address.hostname, annotations=notes))  # ready: joins
        wait_until(lambda: http.get("/ready").json()["loops"].get(loop) == "running")
        assert (
            app.runtime.kv_loops.subscribers[backend_id].settings.endpoint
            == f"tcp://127.0.0.1:{port}"
        )
        wait_until(lambda: http.get("/ready").status_code == 200)
        _complete(gw.url, 6)  # through the gateway, to the pod's engine
        wait_until(lambda: app.runtime.stack.precise.blocks(backend_id) > 0)
        [state] = http.get("/admin/backends").json()["backends"]
        assert state["precise_index"]["blocks"] == app.runtime.stack.precise.blocks(backend_id)
        assert state["kv_events"]["batches"] > 0 and state["kv_events"]["decode_errors"] == 0
        assert (
            f'kvgate_kv_events_batches_total{{backend="{backend_id}"}}' in http.get("/metrics").text
        )

        api.delete(PODS, "vllm-0")  # the pod leaves: its loop and its blocks go
        wait_until(lambda: loop not in http.get("/ready").json()["loops"])
        assert http.get("/admin/backends").json()["backends"] == []
        assert backend_id not in app.runtime.kv_loops.subscribers
        assert not app.runtime.stack.precise.tracks(backend_id)
        page = http.get("/metrics").text
        assert f'kvgate_kv_events_batches_total{{backend="{backend_id}"}}' not in page
        assert f'kvgate_precise_index_blocks{{backend="{backend_id}"}}' not in page
        _complete(url, 3, seed=100)  # the engine still publishes, straight to it
        time.sleep(0.5)
        assert not app.runtime.stack.precise.tracks(backend_id)  # nobody listens any more


async def test_a_publisher_at_an_ipv6_pod_address_is_followed() -> None:
    ctx = zmq.asyncio.Context()
    pub = ctx.socket(zmq.PUB)
    pub.setsockopt(zmq.IPV6, 1)
    try:
        port = pub.bind_to_random_port("tcp://[::1]")
    except zmq.ZMQError:
        ctx.destroy(linger=0)
        pytest.skip("no IPv6 loopback here")
    [source] = kv_events_sources({KV_EVENTS_PORT: str(port)}, "[::1]", 1, pytest.fail)
    assert source is not None
    received: list[KvEventBatch] = []
    subscriber = KvEventSubscriber(
        "pod", source_settings(source), lambda _id, batch: received.append(batch)
    )
    task = asyncio.create_task(subscriber.run())
    try:
        payload = msgpack.packb([0.0, [["AllBlocksCleared"]], 0])
        for _ in range(100):  # until the SUB socket has joined
            await pub.send_multipart([b"", (0).to_bytes(8, "big"), payload])
            if received:
                break
            await asyncio.sleep(0.02)
        assert received and received[0].seq == 0
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        ctx.destroy(linger=0)
