"""The gateway as a front door: admission control under a 10x burst, API keys, admin and
metrics kept off the API port, client headers that must not steer routing, opaque backends.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Callable

import httpx
import pytest

from routing.percentile import percentile
from tests.chaos.checks import CHAT, assert_survived, chat, is_openai_error
from tests.chaos.conftest import StartGateway
from tests.chaos.load import judge_stream
from tests.support import misbehaviour
from tests.support.fixture_types import StartEngines
from tests.support.gateway_process import gateway_config
from tests.support.raw_engine import RawEngine

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(120)]
STREAM = {**CHAT, "stream": True, "max_tokens": 5}


async def _ttft(client: httpx.AsyncClient) -> tuple[int, float | None, httpx.Headers, bytes]:
    """One streaming request: status, seconds to the first data event, headers, body."""
    t0 = time.monotonic()
    first: float | None = None
    body = b""
    async with client.stream("POST", "/v1/chat/completions", json=STREAM) as resp:
        async for part in resp.aiter_raw():
            if first is None and b"data:" in part:
                first = time.monotonic() - t0
            body += part
    return resp.status_code, first, resp.headers, body


def test_burst_ten_times_capacity_is_shed(
    gateway: StartGateway, fake_engines: StartEngines, figures: Callable[..., None]
) -> None:
    (_, s1), (_, s2) = fake_engines(2, ttft_delay=0.3, tokens=5, token_delay=0.02)
    admission = {"enabled": True, "max_in_flight_per_backend": 2, "max_queue": 4}
    gw = gateway(gateway_config([s1.url, s2.url], admission=admission))
    capacity = 2 * 2 + 4  # in flight on two backends, plus the queue

    async def run() -> tuple[list[float], list[tuple[int, float | None, httpx.Headers, bytes]]]:
        limits = httpx.Limits(max_connections=200)
        async with httpx.AsyncClient(base_url=gw.url, timeout=60.0, limits=limits) as client:
            unloaded = [(await _ttft(client))[1] or 0.0 for _ in range(5)]
            burst = await asyncio.gather(*(_ttft(client) for _ in range(10 * capacity)))
        return unloaded, burst

    unloaded, burst = asyncio.run(run())
    statuses = [status for status, *_ in burst]
    shed = [b for b in burst if b[0] == 429]
    admitted = [b[1] for b in burst if b[0] == 200 and b[1] is not None]
    base = percentile(unloaded, 50)
    figures(
        requests=len(burst),
        shed_fraction=round(len(shed) / len(burst), 3),
        ttft_unloaded_s=round(base, 3),
        ttft_admitted_p50_s=round(percentile(admitted, 50), 3) if admitted else None,
        ttft_admitted_p99_s=round(percentile(admitted, 99), 3) if admitted else None,
    )
    assert set(statuses) <= {200, 429}, f"a burst must be admitted or shed with 429: {statuses}"
    assert shed, "a burst of 10x capacity was not shed at all"
    for _, _, headers, body in shed:
        assert int(headers.get("retry-after", "0")) >= 1, "429 without an honest Retry-After"
        assert b'"error"' in body, f"429 body is not an OpenAI-shaped error: {body[:200]!r}"
    cut = [b for b in burst if b[0] == 200 and not judge_stream(b[3]).done]
    assert not cut, f"{len(cut)} admitted streams did not finish"
    assert admitted and percentile(admitted, 99) < 10.0, "admitted requests starved"
    assert_survived(gw)


def test_policy_header_is_ignored_by_default(
    gateway: StartGateway, fake_engines: StartEngines
) -> None:
    (e1, s1), (e2, s2) = fake_engines(2)
    gw = gateway(gateway_config([s1.url, s2.url]))
    for policy in ("session", "no-such-policy"):
        statuses = [
            chat(gw, headers={"x-kvgate-policy": policy, "x-session-id": "pin"}).status_code
            for _ in range(10)
        ]
        assert statuses == [200] * 10, f"x-kvgate-policy: {policy} was not ignored: {statuses}"
    served = (len(e1.inference_requests()), len(e2.inference_requests()))
    assert min(served) >= 5, f"a client header pinned requests to one backend: {served}"
    assert_survived(gw)


_KEY = "sk-chaos-tenant-a"
_SECURITY = {
    "api_keys": [
        {
            "name": "tenant-a",
            "sha256": hashlib.sha256(_KEY.encode()).hexdigest(),
            "tier": "standard",
            "requests_per_minute": 100_000,
            "tokens_per_minute": 100_000_000,
        }
    ]
}
_REFUSED = {401, 403, 404}


def test_api_keys_guard_engines_admin_and_metrics(
    gateway: StartGateway, fake_engines: StartEngines
) -> None:
    [(engine, server)] = fake_engines(1)
    env: dict[str, str | None] = {"KVGATE_ADMIN_KEY": "chaos-admin-secret"}
    gw = gateway(gateway_config([server.url], security=_SECURITY), env=env)
    for auth in (None, "Bearer sk-wrong", "Bearer", "Basic c2stY2hhb3M="):
        headers = {"authorization": auth} if auth else {}
        resp = chat(gw, headers=headers)
        assert resp.status_code in (401, 403), (
            f"authorization {auth!r}: want 401, got {resp.status_code}"
        )
        assert is_openai_error(resp)
    assert not engine.inference_requests(), "a request without a valid key reached the engine"
    assert chat(gw, headers={"authorization": f"Bearer {_KEY}"}).status_code == 200
    for auth in (None, f"Bearer {_KEY}"):
        headers = {"authorization": auth} if auth else {}
        for method, path in (
            ("GET", "/admin/backends"),
            ("POST", "/admin/route"),
            ("GET", "/metrics"),
        ):
            resp = httpx.request(method, gw.url + path, headers=headers, json=CHAT, timeout=10.0)
            assert resp.status_code in _REFUSED, (
                f"{method} {path} on the API port with API keys configured and "
                f"{'the API key' if auth else 'no key'}: want refused, got {resp.status_code}"
            )
    assert gw.running and gw.healthy()


def test_admin_port_keeps_admin_off_the_api_port(
    gateway: StartGateway, fake_engines: StartEngines
) -> None:
    [(_, server)] = fake_engines(1)
    from sim.live.processes import free_port

    server_section = {"access_log": False, "admin_port": free_port()}
    gw = gateway(gateway_config([server.url], security=_SECURITY, server=server_section))
    for path in ("/admin/backends", "/metrics"):
        resp = httpx.get(gw.url + path, headers={"authorization": f"Bearer {_KEY}"}, timeout=10.0)
        assert resp.status_code == 404, (
            f"GET {path} on the API port with admin_port set: {resp.status_code}"
        )
    assert gw.running and gw.healthy()


def test_backend_addresses_stay_opaque(
    gateway: StartGateway, fake_engines: StartEngines, raw_engines: Callable[..., RawEngine]
) -> None:
    [(_, server)] = fake_engines(1)
    broken = raw_engines(misbehaviour.slam)
    upstream = {"max_attempts": 1}
    gw = gateway(gateway_config([server.url, broken.url], upstream=upstream))
    answers = [chat(gw) for _ in range(4)]
    addresses = (server.url.removeprefix("http://"), broken.url.removeprefix("http://"))
    for resp in answers:
        shown = resp.headers.get("x-kvgate-backend", "") + resp.text
        leaked = [a for a in addresses if a in shown]
        assert not leaked, (
            f"{resp.status_code}: internal address {leaked} shown to a client: {shown[:300]}"
        )
    assert {r.status_code for r in answers} == {200, 502}, [r.status_code for r in answers]
    assert_survived(gw)


def test_small_tenant_keeps_its_share_under_a_flood(
    gateway: StartGateway, fake_engines: StartEngines, figures: Callable[..., None]
) -> None:
    (_, s1), (_, s2) = fake_engines(2, ttft_delay=0.3, tokens=5, token_delay=0.02)
    admission = {
        "enabled": True,
        "max_in_flight_per_backend": 2,
        "max_queue": 8,
        "tenant_header": "x-tenant",
    }
    gw = gateway(gateway_config([s1.url, s2.url], admission=admission))

    async def one(client: httpx.AsyncClient, tenant: str) -> int:
        resp = await client.post("/v1/chat/completions", json=CHAT, headers={"x-tenant": tenant})
        return resp.status_code

    async def run() -> tuple[list[int], list[int]]:
        limits = httpx.Limits(max_connections=200)
        async with httpx.AsyncClient(base_url=gw.url, timeout=60.0, limits=limits) as client:
            flood = [asyncio.create_task(one(client, "big")) for _ in range(60)]
            await asyncio.sleep(0.05)  # the flood is queued first
            small = [asyncio.create_task(one(client, "small")) for _ in range(6)]
            return await asyncio.gather(*flood), await asyncio.gather(*small)

    big, small = asyncio.run(run())
    big_ok, small_ok = big.count(200) / len(big), small.count(200) / len(small)
    figures(big_admitted=f"{big.count(200)}/{len(big)}", small_admitted=f"{small.count(200)}/6")
    assert set(big + small) <= {200, 429}, f"want 200 or 429: {sorted(set(big + small))}"
    assert small_ok >= big_ok, (
        f"a small tenant got {small_ok:.0%} admitted against the flooding tenant's {big_ok:.0%}"
    )
    assert_survived(gw)


def test_key_request_rate_limit(gateway: StartGateway, fake_engines: StartEngines) -> None:
    [(engine, server)] = fake_engines(1)
    entry = {**_SECURITY["api_keys"][0], "requests_per_minute": 5}
    env: dict[str, str | None] = {"KVGATE_ADMIN_KEY": "chaos-admin-secret"}
    gw = gateway(gateway_config([server.url], security={"api_keys": [entry]}), env=env)
    auth = {"authorization": f"Bearer {_KEY}"}
    answers = [chat(gw, headers=auth) for _ in range(10)]
    statuses = [r.status_code for r in answers]
    assert statuses[:5] == [200] * 5, f"within the key's 5 requests a minute: {statuses}"
    limited = [r for r in answers if r.status_code == 429]
    assert len(limited) >= 4, f"a key over its 5 requests a minute was not limited: {statuses}"
    for resp in limited:
        assert int(resp.headers.get("retry-after", "0")) >= 1 and is_openai_error(resp)
    assert len(engine.inference_requests()) <= 6, "requests over the key's limit reached the engine"


def test_headers_towards_engines(gateway: StartGateway, fake_engines: StartEngines) -> None:
    [(engine, server)] = fake_engines(1)
    security = {**_SECURITY, "upstream_authorization": "strip", "forwarded_for": True}
    env: dict[str, str | None] = {"KVGATE_ADMIN_KEY": "chaos-admin-secret"}
    gw = gateway(gateway_config([server.url], security=security), env=env)
    headers = {"authorization": f"Bearer {_KEY}", "x-forwarded-for": "203.0.113.7"}
    assert chat(gw, headers=headers).status_code == 200
    [seen] = engine.inference_requests()
    assert "authorization" not in seen.headers, "the client's API key was passed to the engine"
    forwarded = seen.headers.get("x-forwarded-for", "")
    assert forwarded.startswith("203.0.113.7") and "127.0.0.1" in forwarded, (
        f"X-Forwarded-For should have the client appended: {forwarded!r}"
    )
