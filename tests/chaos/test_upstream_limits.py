"""The gateway's own upstream limits under a real `kvgate serve`: a full connection pool, an
outage of every backend, and the honesty of what the gateway tells clients to wait.

What must hold: a full pool is the gateway's overload (503 ``gateway_overloaded`` with
Retry-After), never a backend's failure; ``Retry-After`` says when a backend returns; retries
stay within the retry budget however many requests fail.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable

import httpx
import pytest

from tests.chaos.checks import assert_survived, backend_states, chat
from tests.chaos.conftest import StartGateway
from tests.support.fixture_types import StartEngines
from tests.support.gateway_process import gateway_config

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(120)]
_CHAT = {"model": "m1", "messages": [{"role": "user", "content": "hi"}]}


def test_full_pool_does_not_eject(gateway: StartGateway, fake_engines: StartEngines) -> None:
    (_, s1), (_, s2) = fake_engines(2, ttft_delay=1.5)
    upstream = {"max_connections": 2, "pool_timeout_s": 0.3}
    gw = gateway(gateway_config([s1.url, s2.url], upstream=upstream))

    async def burst() -> list[httpx.Response]:
        async with httpx.AsyncClient(base_url=gw.url, timeout=30.0) as c:
            calls = [c.post("/v1/chat/completions", json=_CHAT) for _ in range(12)]
            return await asyncio.gather(*calls)

    answers = asyncio.run(burst())
    statuses = sorted(r.status_code for r in answers)
    # 429: admission control may shed first; what must not happen is a 504 and an ejection.
    assert set(statuses) <= {200, 429, 503}, f"want 200 or 503 gateway_overloaded: {statuses}"
    for r in answers:
        if r.status_code == 503:
            assert r.json()["error"]["code"] == "gateway_overloaded", r.text
            assert int(r.headers.get("retry-after", "0")) >= 1
    states = backend_states(gw)
    assert set(states.values()) == {"healthy"}, f"a full pool ejected backends: {states}"
    assert_survived(gw)


def test_retry_after_is_honest(gateway: StartGateway, fake_engines: StartEngines) -> None:
    (e1, s1), (e2, s2) = fake_engines(2)
    health = {"ejection_base_s": 8.0, "ejection_max_s": 8.0, "passive_fail_threshold": 1}
    gw = gateway(gateway_config([s1.url, s2.url], health=health))
    e1.fail_status = e2.fail_status = 503
    answer = None
    for _ in range(10):
        resp = chat(gw)
        if resp.status_code == 503 and "no_healthy_backend" in resp.text:
            answer = resp
            break
    assert answer is not None, "both backends answering 503 were never ejected"
    retry_after = int(answer.headers["retry-after"])
    assert 2 <= retry_after <= 9, (
        f"Retry-After {retry_after}: want the seconds until the first ejected backend is "
        "readmitted (~8 s here)"
    )


def test_retries_cannot_amplify_an_outage(
    gateway: StartGateway, fake_engines: StartEngines, figures: Callable[..., None]
) -> None:
    (e1, s1), (e2, s2) = fake_engines(2)
    # Never ejected: every request meets two failing engines, each worth a retry.
    gw = gateway(gateway_config([s1.url, s2.url], health={"passive_fail_threshold": 1000}))
    e1.fail_status = e2.fail_status = 503

    async def outage() -> list[int]:
        async with httpx.AsyncClient(base_url=gw.url, timeout=20.0) as client:
            statuses: list[int] = []
            for _ in range(30):
                batch = [client.post("/v1/chat/completions", json=_CHAT) for _ in range(10)]
                statuses += [r.status_code for r in await asyncio.gather(*batch)]
            return statuses

    t0 = time.monotonic()
    statuses = asyncio.run(outage())
    seconds = time.monotonic() - t0
    sent = len(e1.inference_requests()) + len(e2.inference_requests())
    figures(requests=len(statuses), upstream_attempts=sent, seconds=round(seconds, 2))
    # Defaults: retries up to retry_budget_ratio 0.2 of the requests plus a reserve of
    # retry_budget_min_per_s 5 a second, counted over a 10 s window (as Finagle's budget).
    allowed = len(statuses) * 1.2 + 5 * 10 * math.ceil(seconds / 10) + 5
    assert sent <= allowed, (
        f"{len(statuses)} requests made {sent} upstream attempts in {seconds:.1f} s; a retry "
        f"budget of 20 % + 5/s allows {allowed:.0f} (without one: {2 * len(statuses)})"
    )
    assert set(statuses) <= {502, 503}, sorted(set(statuses))
    assert_survived(gw)
