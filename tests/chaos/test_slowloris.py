"""Slowloris against a real `kvgate serve`: connections that never finish a request.

What must hold: idle, half-sent and idle keep-alive connections are closed by the server's
timeouts (here 3 s), the connection cap keeps the gateway's descriptors bounded, and a
legitimate client is served while the attack goes on. The 10k idle connections need 10k
descriptors here and up to the cap in the gateway: the conftest raises this process's soft
limit to the hard one (20,000 on the machine this was written on), the gateway inherits it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import suppress

import httpx
import pytest

from tests.chaos.checks import assert_survived, chat, wait_for
from tests.chaos.conftest import StartGateway
from tests.support.fixture_types import StartEngines
from tests.support.gateway_process import GatewayProcess, gateway_config
from tests.support.hostile import IdleSockets

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(180)]
TIMEOUTS = {"header_timeout_s": 3.0, "idle_timeout_s": 3.0, "body_timeout_s": 3.0}


def test_slowloris_10k_idle_connections(
    gateway: StartGateway, fake_engines: StartEngines, figures: Callable[..., None]
) -> None:
    [(_, server)] = fake_engines(1)
    gw = gateway(gateway_config([server.url], server=TIMEOUTS))
    with IdleSockets(gw.port, 10_000).open(within=30.0) as idle:
        fds_held = gw.open_fds()
        t0 = time.monotonic()
        legit = _legit_request(gw, within=30.0)
        legit_s = time.monotonic() - t0
        try:
            wait_for(lambda: idle.closed_by_server() == idle.connected, within=45.0, step=0.5)
        finally:
            closed = idle.closed_by_server()
            figures(
                idle_connected=idle.connected,
                idle_closed=closed,
                gateway_fds_held=fds_held,
                legit_status=legit,
                legit_s=round(legit_s, 2),
            )
    assert legit == 200, f"a legitimate client got {legit} while 10k idle connections were open"
    assert_survived(gw)


def _legit_request(gw: GatewayProcess, within: float) -> int | None:
    """A client that retries (as SDKs do) until served or ``within`` s: a connection cap may
    turn it away until the server's timeouts have cleared the idle connections."""
    deadline = time.monotonic() + within
    status: int | None = None
    while time.monotonic() < deadline:
        try:
            status = chat(gw, timeout=max(1.0, deadline - time.monotonic())).status_code
        except httpx.HTTPError:
            status = None
        if status == 200:
            break
        time.sleep(0.5)
    return status


def test_slowloris_half_sent_headers(
    gateway: StartGateway, fake_engines: StartEngines, figures: Callable[..., None]
) -> None:
    [(_, server)] = fake_engines(1)
    gw = gateway(gateway_config([server.url], server=TIMEOUTS))
    partial = b"POST /v1/chat/completions HTTP/1.1\r\nHost: kvgate\r\nX-Slow: "
    with IdleSockets(gw.port, 300, payload=partial).open() as idle:
        t0 = time.monotonic()
        # One more header byte per connection every half second: data keeps arriving, but
        # the head never completes; header_timeout_s bounds the whole head, not each byte.
        while time.monotonic() - t0 < 20 and idle.closed_by_server() < idle.connected:
            for sock in idle.live:
                with suppress(OSError):
                    sock.send(b"a")
            time.sleep(0.5)
        closed = idle.closed_by_server()
        figures(half_sent=idle.connected, closed=closed, seconds=round(time.monotonic() - t0, 1))
        assert closed == idle.connected, (
            f"{idle.connected - closed} of {idle.connected} connections trickling a head "
            "were still open after 20 s (header_timeout_s=3)"
        )
    assert chat(gw).status_code == 200
    assert_survived(gw)


def test_slowloris_idle_keep_alive(
    gateway: StartGateway, fake_engines: StartEngines, figures: Callable[..., None]
) -> None:
    [(_, server)] = fake_engines(1)
    gw = gateway(gateway_config([server.url], server=TIMEOUTS))
    one_request = b"GET /health HTTP/1.1\r\nHost: kvgate\r\n\r\n"
    with IdleSockets(gw.port, 200, payload=one_request).open() as idle:
        t0 = time.monotonic()
        try:
            wait_for(lambda: idle.closed_by_server() == idle.connected, within=20.0, step=0.5)
        finally:
            figures(keep_alive=idle.connected, closed=idle.closed_by_server())
        seconds = time.monotonic() - t0
    figures(seconds=round(seconds, 1))
    assert_survived(gw)
