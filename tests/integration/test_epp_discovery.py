"""`kvgate epp --pool` as a real process: its endpoints come from a fake Kubernetes API.

The EPP reports not ready until it has found the InferencePool and listed its pods, then
ready whether or not a pod is (with none, requests get 503, as the reference's); it picks the
pod's replica up once the API marks it ready (the backend shows up in its metrics) and drops
it once the pod is deleted, without a restart.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit

import grpc
import httpx
from grpc_health.v1 import health_pb2, health_pb2_grpc

from sim.live.processes import ChildProcess, free_port, kvgate_command, start_emulator
from tests.support.fake_kube import PODS, POOLS, FakeKubeAPI, inference_pool, pod

MODEL = "kvgate-demo"
SERVING = health_pb2.HealthCheckResponse.SERVING


def _until(check: Callable[[], bool], what: str, timeout_s: float = 15.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_epp_follows_the_pools_ready_pods(tmp_path: Path) -> None:
    child, [url] = start_emulator(1, "demo", MODEL, tmp_path / "emulator.log", speedup=50.0)
    address = urlsplit(url)
    grpc_port, health_port, metrics_port = free_port(), free_port(), free_port()
    with child, FakeKubeAPI() as api:
        api.put(PODS, pod("vllm-0", address.hostname, ready=False), namespace="ml")
        args = ["epp", "--pool", "llm", "--namespace", "ml", "--kube-api", api.url]
        args += ["--grpc-port", str(grpc_port), "--health-port", str(health_port)]
        args += ["--metrics-port", str(metrics_port)]
        metrics_url = f"http://127.0.0.1:{metrics_port}/metrics"
        with ChildProcess(kvgate_command(*args), tmp_path / "epp.log").start() as epp:
            epp.wait_for_http(metrics_url, timeout_s=30.0, interval_s=0.05)
            with grpc.insecure_channel(f"127.0.0.1:{health_port}") as channel:
                check = health_pb2_grpc.HealthStub(channel).Check

                def ready() -> bool:
                    req = health_pb2.HealthCheckRequest(service="readiness")
                    return bool(check(req, timeout=5.0).status == SERVING)

                def up() -> float:
                    text = httpx.get(metrics_url, timeout=5.0).text
                    return sum(
                        float(line.rsplit(" ", 1)[1])
                        for line in text.splitlines()
                        if line.startswith("kvgate_backend_healthy{") and address.netloc in line
                    )

                time.sleep(1.0)  # a few readiness rounds
                assert not ready()  # no InferencePool yet
                api.put(POOLS, inference_pool("llm", ports=(address.port or 0,)), namespace="ml")
                _until(ready, "the pool listed")
                assert up() == 0.0  # its only pod is not ready
                api.put(PODS, pod("vllm-0", address.hostname, ready=True), namespace="ml")
                _until(lambda: up() == 1.0, "the pod's replica")
                api.delete(PODS, "vllm-0", namespace="ml")
                _until(lambda: up() == 0.0, "the pod's removal")
                assert ready()
            assert epp.running  # no restart along the way
        log = (tmp_path / "epp.log").read_text()
        assert f"backend {address.netloc} added" in log
        assert f"backend {address.netloc} removed" in log
