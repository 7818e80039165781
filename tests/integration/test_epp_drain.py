"""`kvgate epp` drains on SIGTERM as `kvgate serve` does: its gRPC readiness turns NOT_SERVING
at once (liveness stays SERVING) while ext_proc keeps listening for `server.drain_delay_s`,
then it stops. SIGHUP reloads its config file."""

from __future__ import annotations

import os
import signal
import socket
import time
from pathlib import Path

import grpc
import httpx
from grpc_health.v1 import health_pb2, health_pb2_grpc

from sim.live.envoy import start_epp
from sim.live.processes import start_emulator

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2.0):
            return True
    except OSError:
        return False


def test_sigterm_turns_health_not_serving_while_ext_proc_keeps_listening(
    tmp_path: Path,
) -> None:
    child, [url] = start_emulator(1, "demo", "kvgate-demo", tmp_path / "emulator.log")
    config = tmp_path / "kvgate.yaml"
    config.write_text("server:\n  drain_delay_s: 3.0\n  shutdown_grace_s: 1.0\n")
    with child:
        epp = start_epp([url], tmp_path / "epp.log", config=config)
        with epp.proc, grpc.insecure_channel(f"127.0.0.1:{epp.health_port}") as channel:
            check = health_pb2_grpc.HealthStub(channel).Check

            def status(service: str = "readiness") -> int:
                req = health_pb2.HealthCheckRequest(service=service)
                return int(check(req, timeout=5.0).status)

            deadline = time.monotonic() + 15
            while status() != SERVING:
                assert time.monotonic() < deadline, "the EPP never turned ready"
                time.sleep(0.05)
            sent = time.monotonic()
            os.kill(epp.proc.pid, signal.SIGTERM)
            deadline = sent + 2.0
            while status() != NOT_SERVING:
                assert time.monotonic() < deadline, "health still SERVING after SIGTERM"
                time.sleep(0.05)
            assert _accepts(epp.grpc_port), "ext_proc stopped listening during the delay"
            assert status("liveness") == SERVING  # no restart mid-drain
            assert epp.proc.running
            while epp.proc.running:
                assert time.monotonic() < sent + 15, "the EPP did not stop after the delay"
                time.sleep(0.05)
            assert time.monotonic() - sent >= 2.5, "stopped before the drain delay"
        assert "Traceback" not in (tmp_path / "epp.log").read_text()


def test_sighup_reloads_the_epps_backends(tmp_path: Path) -> None:
    child, [a, b] = start_emulator(2, "demo", "kvgate-demo", tmp_path / "emulator.log")
    config = tmp_path / "kvgate.yaml"
    config.write_text(f"backends:\n  - url: {a}\n")
    with child:
        epp = start_epp([], tmp_path / "epp.log", config=config, extra=["--log-level", "info"])
        with epp.proc:
            assert _backends_up(epp.metrics_url) == {a.split("//")[1]}
            config.write_text(f"backends:\n  - url: {b}\n")
            os.kill(epp.proc.pid, signal.SIGHUP)
            deadline = time.monotonic() + 10
            while _backends_up(epp.metrics_url) != {b.split("//")[1]}:
                assert time.monotonic() < deadline, "SIGHUP did not reload the backends"
                time.sleep(0.05)
            assert epp.proc.running
    assert "config reloaded: backends +1 -1" in (tmp_path / "epp.log").read_text()


def _backends_up(metrics_url: str) -> set[str]:
    page = httpx.get(metrics_url, timeout=5.0).text
    return {
        line.split('backend="', 1)[1].split('"', 1)[0]
        for line in page.splitlines()
        if line.startswith("kvgate_backend_healthy{")
    }
