"""Run the endpoint picker: ext_proc gRPC, gRPC health and Prometheus metrics, one event loop.

Ports (the reference EPP's defaults): ext_proc 9002, health 9003 (`grpc.health.v1`, the
reference's service names: `gateway.epp.health`), metrics 9090 (`GET /metrics`). Port 0 picks
a free one; the start-up line names the ports bound. The gateway's health probes and metric
scrapes run here as under `kvgate serve`, supervised (`gateway.supervisor`); readiness is
NOT_SERVING while the probe loop is down. SIGTERM drains as `kvgate serve` does: readiness
turns NOT_SERVING at once (liveness stays) while ext_proc keeps answering for
`server.drain_delay_s` (so Envoy's health checks move traffic away first), then the server
stops, letting streams finish for up to `server.shutdown_grace_s`. SIGINT, or a second
signal, skips the delay.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal

import grpc
from grpc_health.v1 import health_pb2_grpc
from grpc_health.v1.health import aio as health_aio
from prometheus_client import CONTENT_TYPE_LATEST

from gateway.epp.health import PickerHealth, pool_synced
from gateway.epp.pb.envoy.service.ext_proc.v3 import external_processor_pb2_grpc as pb_grpc
from gateway.epp.picker import EndpointPicker
from gateway.epp.processor import ExternalProcessor
from gateway.epp.request_metrics import EppRequestMetrics
from gateway.epp.settings import EppSettings
from gateway.epp.tls import add_ext_proc_port
from gateway.runtime import Runtime
from gateway.services import Services

log = logging.getLogger(__name__)


async def serve_epp(runtime: Runtime, settings: EppSettings) -> None:
    """Serve `runtime` until SIGINT/SIGTERM."""
    stop, hurry = asyncio.Event(), asyncio.Event()
    loop = asyncio.get_running_loop()

    def on_signal(sig: signal.Signals) -> None:
        if stop.is_set() or sig == signal.SIGINT:
            hurry.set()
        stop.set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, on_signal, sig)
    if runtime.reloader is not None:  # the config file reloaded, as `kvgate serve` does
        loop.add_signal_handler(signal.SIGHUP, runtime.reloader.request)
    cfg = runtime.config
    services = Services(runtime)
    await services.start()
    counted = EppRequestMetrics(runtime.metrics.registry, runtime.metrics.model_label)
    picker = EndpointPicker(
        runtime.director, settings.max_endpoints - 1, counted, admission=runtime.admission
    )
    # A BUFFERED body comes in one message: room for the largest body the config allows.
    limit = cfg.server.max_body_bytes + 64 * 1024
    server = grpc.aio.server(
        options=[
            ("grpc.max_receive_message_length", limit),
            ("grpc.max_send_message_length", limit),
        ]
    )
    pb_grpc.add_ExternalProcessorServicer_to_server(
        ExternalProcessor(picker, cfg.server.max_body_bytes), server
    )
    grpc_port, transport = add_ext_proc_port(
        server,
        f"{settings.host}:{settings.grpc_port}",
        secure=settings.secure_serving,
        cert_path=settings.cert_path,
    )
    health_server = grpc.aio.server()
    checks = health_aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(checks, health_server)
    health_pb2_grpc.add_HealthServicer_to_server(checks, server)  # for Envoy's cluster checks
    health_port = health_server.add_insecure_port(f"{settings.host}:{settings.health_port}")
    metrics = await asyncio.start_server(
        lambda r, w: _metrics_client(runtime, r, w), settings.host, settings.metrics_port
    )
    metrics_port = metrics.sockets[0].getsockname()[1]
    health = PickerHealth(checks, lambda: pool_synced(runtime) and services.ready())
    await health.start()
    await server.start()
    await health_server.start()
    log.info(
        "kvgate epp: ext_proc on %s:%d (%s), health on %s:%d, metrics on http://%s:%d/metrics; "
        "%d/%d backends healthy, policy %s",
        settings.host, grpc_port, transport, settings.host, health_port, settings.host,
        metrics_port,
        len(runtime.pool.healthy()), len(runtime.pool), runtime.scheduler.default_profile,
    )  # fmt: skip
    try:
        loops = services.loops()
        loops.add("readiness", health.run)
        async with asyncio.TaskGroup() as tg:
            supervised = tg.create_task(loops.run(), name="loops")
            await stop.wait()
            await health.drain()
            await _drain_delay(cfg.server.drain_delay_s, hurry)
            supervised.cancel()
    finally:
        metrics.close()
        await server.stop(cfg.server.shutdown_grace_s)
        await health_server.stop(0)
        await services.stop()  # after the last stream: its spans go too


async def _drain_delay(delay_s: float, hurry: asyncio.Event) -> None:
    """Keep picking endpoints while health says NOT_SERVING, until `delay_s` or `hurry`."""
    if hurry.is_set() or delay_s <= 0:
        log.info("kvgate epp: stopping")
        return
    log.info("kvgate epp: draining for %.1f s (health NOT_SERVING), then stopping", delay_s)
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(hurry.wait(), delay_s)


async def _metrics_client(
    runtime: Runtime, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    """A one-request HTTP/1.0 answer: the metrics page on GET /metrics, else 404."""
    try:
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=5.0)
        parts = head.split(b" ", 2)
        if len(parts) > 1 and parts[0] == b"GET" and parts[1].split(b"?")[0] == b"/metrics":
            status, body, kind = b"200 OK", runtime.metrics_page(), CONTENT_TYPE_LATEST.encode()
        else:
            status, body, kind = b"404 Not Found", b"not found\n", b"text/plain"
        writer.write(
            b"HTTP/1.1 " + status + b"\r\ncontent-type: " + kind
            + b"\r\ncontent-length: " + str(len(body)).encode()
            + b"\r\nconnection: close\r\n\r\n" + body
        )  # fmt: skip
        await writer.drain()
    except (TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, OSError):
        pass  # a client that sent no request, or went away: nothing to answer
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
