"""`kvgate serve --pool` as a real process, its backends found through a fake Kubernetes API.

An emulated vLLM replica stands for a pod: the gateway routes to it once the API reports
the pod ready, and stops once the pod is deleted, without a restart.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from sim.live.processes import ChildProcess, gateway_command, start_emulator
from tests.support.fake_kube import PODS, POOLS, FakeKubeAPI, inference_pool, pod

MODEL = "kvgate-demo"
CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}


@pytest.fixture
def replica(tmp_path: Path) -> Iterator[str]:
    child, [url] = start_emulator(1, "demo", MODEL, tmp_path / "emulator.log", speedup=50.0)
    with child:
        yield url


def _until(check: Callable[[], bool], what: str, timeout_s: float = 15.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_serve_routes_to_a_pod_once_ready_and_stops_once_deleted(
    replica: str, tmp_path: Path
) -> None:
    address = urlsplit(replica)
    with FakeKubeAPI() as api:
        api.put(POOLS, inference_pool("llm", ports=(address.port or 0,)), namespace="ml")
        api.put(PODS, pod("vllm-0", address.hostname, ready=False), namespace="ml")
        extra = ["--pool", "llm", "--namespace", "ml", "--kube-api", api.url]
        command = gateway_command([], "prefix-aware", extra=extra)
        with ChildProcess(command, tmp_path / "gateway.log").start() as gateway:
            [m] = gateway.wait_for_line(r"Uvicorn running on (http://[0-9.:]+)")
            with httpx.Client(base_url=m.group(1), timeout=10.0) as client:
                assert client.get("/ready").status_code == 503  # the pod is not ready yet
                assert client.post("/v1/chat/completions", json=CHAT).status_code == 503

                api.put(PODS, pod("vllm-0", address.hostname, ready=True), namespace="ml")
                _until(lambda: client.get("/ready").status_code == 200, "the pod's backend")
                answer = client.post("/v1/chat/completions", json=CHAT)
                assert answer.status_code == 200
                [state] = client.get("/admin/backends").json()["backends"]
                assert state["id"] == address.netloc
                assert answer.headers["x-kvgate-backend"] == state["backend_header"]
                backends = client.get("/admin/backends").json()
                assert address.netloc in str(backends)

                api.delete(PODS, "vllm-0", namespace="ml")
                _until(lambda: client.get("/ready").status_code == 503, "the pod's removal")
                assert client.post("/v1/chat/completions", json=CHAT).status_code == 503
            assert gateway.running  # no restart along the way
        log = (tmp_path / "gateway.log").read_text()
        assert f"backend {address.netloc} added" in log
        assert f"backend {address.netloc} removed" in log


def test_a_stream_in_flight_finishes_after_its_pod_is_removed(tmp_path: Path) -> None:
    child, [url] = start_emulator(1, "demo", MODEL, tmp_path / "emulator.log", speedup=1.0)
    address = urlsplit(url)
    with child, FakeKubeAPI() as api:
        api.put(POOLS, inference_pool("llm", ports=(address.port or 0,)))
        api.put(PODS, pod("vllm-0", address.hostname))
        extra = ["--pool", "llm", "--kube-api", api.url]
        command = gateway_command([], "prefix-aware", extra=extra)
        with ChildProcess(command, tmp_path / "gateway.log").start() as gateway:
            [m] = gateway.wait_for_line(r"Uvicorn running on (http://[0-9.:]+)")
            with httpx.Client(base_url=m.group(1), timeout=30.0) as client:
                _until(lambda: client.get("/ready").status_code == 200, "the pod's backend")
                body = {**CHAT, "stream": True, "max_tokens": 64, "ignore_eos": True}
                with client.stream("POST", "/v1/chat/completions", json=body) as stream:
                    lines = stream.iter_lines()
                    assert next(lines).startswith("data: ")  # the stream has begun
                    api.delete(PODS, "vllm-0")
                    _until(lambda: client.get("/ready").status_code == 503, "the removal")
                    rest = list(lines)
                assert "data: [DONE]" in rest
                # Most of the answer came after the removal: it really was in flight.
                assert sum(line.startswith("data: {") for line in rest) >= 20
                assert not any("error" in line for line in rest)
