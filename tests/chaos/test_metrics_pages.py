"""Odd engine /metrics pages: one backend's page never stops health checking for the pool.

Each case puts a `RawEngine` serving the odd page next to a well-behaved `FakeEngine`; after a
few scrape rounds the good engine starts failing its health checks, and the gateway must
notice (its probe loop still runs), report its loops as running in ``/ready``, and keep
serving from what is healthy.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import httpx
import pytest

from tests.chaos.checks import assert_survived, backend_states, chat, wait_for
from tests.chaos.conftest import StartGateway
from tests.support import misbehaviour
from tests.support.fixture_types import StartEngines
from tests.support.gateway_process import GatewayProcess, gateway_config
from tests.support.raw_engine import RawEngine

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(120)]


def _with_odd_page(
    page: bytes,
    gateway: StartGateway,
    raw_engines: Callable[..., RawEngine],
    fake_engines: StartEngines,
) -> tuple[GatewayProcess, RawEngine, str]:
    odd = raw_engines(misbehaviour.well())
    [(good, server)] = fake_engines(1)
    gw = gateway(gateway_config([odd.url, server.url]))
    odd.metrics_page = page  # turns odd while the gateway runs
    time.sleep(1.0)  # ten scrape rounds of the odd page
    statuses = [chat(gw).status_code for _ in range(4)]
    assert statuses == [200] * 4, f"requests failed next to an odd /metrics page: {statuses}"
    good.health_status = 503
    try:
        wait_for(lambda: backend_states(gw)[server.url] != "healthy", within=10.0)
    except AssertionError:
        raise AssertionError(
            "a failing backend was never marked unhealthy: the odd page stopped health checking"
        ) from None
    return gw, odd, server.url


def _assert_loops_running(gw: GatewayProcess) -> None:
    ready = httpx.get(gw.url + "/ready", timeout=5.0).json()
    loops = ready.get("loops")
    assert isinstance(loops, dict) and loops, f"/ready reports no background loops: {ready}"
    assert set(loops.values()) == {"running"}, f"a background loop is not running: {loops}"
    admin = httpx.get(gw.url + "/admin/backends", timeout=5.0).json()
    assert admin.get("loops") == loops, f"/admin/backends reports other loops: {admin.get('loops')}"


def test_metrics_page_huge_values(
    gateway: StartGateway, raw_engines: Callable[..., RawEngine], fake_engines: StartEngines
) -> None:
    page = misbehaviour.huge_values_page()
    gw, _, _ = _with_odd_page(page, gateway, raw_engines, fake_engines)
    _assert_loops_running(gw)
    assert_survived(gw)


def test_metrics_page_50_mb(
    gateway: StartGateway,
    raw_engines: Callable[..., RawEngine],
    fake_engines: StartEngines,
    figures: Callable[..., None],
) -> None:
    page = misbehaviour.huge_page(50)
    gw, _, _ = _with_odd_page(page, gateway, raw_engines, fake_engines)
    rss = gw.rss_mb()
    figures(rss_after_mb=round(rss, 1))
    _assert_loops_running(gw)
    # A 4 MiB cap (health.max_scrape_bytes) keeps a 50 MB page out of memory altogether.
    assert rss < 400, f"gateway RSS {rss:.0f} MB after scraping a 50 MB page"
    assert_survived(gw)


def test_metrics_page_absurd_block_size(
    gateway: StartGateway, raw_engines: Callable[..., RawEngine], fake_engines: StartEngines
) -> None:
    page = misbehaviour.absurd_block_size_page()
    gw, odd, _ = _with_odd_page(page, gateway, raw_engines, fake_engines)
    state = httpx.get(gw.url + "/admin/backends", timeout=5.0).json()
    [entry] = [b for b in state["backends"] if b["url"] == odd.url]
    block = (entry.get("metrics") or {}).get("block_size")
    assert block is None or block <= 1 << 20, f"block_size {block} taken from the engine as is"
    _assert_loops_running(gw)
    assert_survived(gw)
