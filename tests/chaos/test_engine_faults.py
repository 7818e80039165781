"""Misbehaving engines behind a real `kvgate serve`: killed, hung, garbled, slow, two-faced.

What must hold: a request that had not started streaming is never lost while another backend
is up (failover), a stream cut after it started ends with a well-formed SSE error event, no
answer of one request leaks into another, and the gateway itself stays up and bounded.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import httpx
import pytest

from tests.chaos.checks import assert_survived, backend_states, chat, wait_for
from tests.chaos.conftest import Emulator, StartGateway
from tests.chaos.load import judge_stream, p99, run_load
from tests.support import misbehaviour
from tests.support.fixture_types import StartEngines
from tests.support.gateway_process import GatewayProcess, gateway_config
from tests.support.raw_engine import RawEngine

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(180)]
RawEngines = Callable[..., RawEngine]
_CHAT = {"model": "m1", "messages": [{"role": "user", "content": "hi"}]}
_STREAM = {**_CHAT, "stream": True}


def test_backend_killed_at_load(
    gateway: StartGateway, emulators: Callable[[int], list[Emulator]], figures: Callable[..., None]
) -> None:
    victim, survivor = emulators(2)
    gw = gateway(gateway_config([victim.url, survivor.url]))
    baseline = asyncio.run(run_load(gw.url, 3.0, 8))
    marks: dict[str, float] = {}

    async def fault() -> list:
        load = asyncio.create_task(run_load(gw.url, 9.0, 8))
        await asyncio.sleep(2.0)
        marks["kill"] = time.monotonic()
        victim.kill()
        await asyncio.to_thread(_wait_state, gw, victim.url, lambda s: s != "healthy", 15.0)
        marks["ejected"] = time.monotonic()
        await asyncio.sleep(1.0)
        await asyncio.to_thread(victim.start)
        marks["restart"] = time.monotonic()
        await asyncio.to_thread(_wait_state, gw, victim.url, lambda s: s == "healthy", 20.0)
        marks["readmitted"] = time.monotonic()
        return await load

    attempts = asyncio.run(fault())
    during = [a for a in attempts if marks["kill"] <= a.started_at <= marks["readmitted"]]
    lost = [a for a in baseline + attempts if a.lost_before_streaming]
    cut = [a for a in attempts if a.cut_after_start]
    good_errors = [a for a in cut if a.verdict and a.verdict.well_formed and a.verdict.error_event]
    figures(
        requests=len(baseline) + len(attempts),
        lost_not_started=len(lost),
        streams_cut=len(cut),
        sse_error_events_ok=len(good_errors),
        p99_baseline_s=p99(baseline),
        p99_fault_s=p99(during),
        eject_s=round(marks["ejected"] - marks["kill"], 2),
        readmit_s=round(marks["readmitted"] - marks["restart"], 2),
    )
    statuses = sorted({a.status for a in lost}, key=str)
    assert not lost, f"{len(lost)} requests lost before streaming (statuses {statuses}); want 0"
    assert len(good_errors) == len(cut), (
        f"{len(cut) - len(good_errors)} of {len(cut)} cut streams lack a well-formed error event"
    )
    assert_survived(gw)


def _wait_state(gw, url: str, want: Callable[[str], bool], within: float) -> None:
    wait_for(lambda: want(backend_states(gw)[url]), within)


def test_hung_backend_fails_over(
    gateway: StartGateway, raw_engines: RawEngines, figures: Callable[..., None]
) -> None:
    hung, good = raw_engines(misbehaviour.well()), raw_engines(misbehaviour.well())
    config = gateway_config([hung.url, good.url], upstream={"first_byte_timeout_s": 1.0})
    # Streams: an engine sends a stream's head as soon as it accepts the request, so a head
    # that never comes is a hung engine (a non-streaming head waits for the whole answer).
    latencies = _hang_one_of_two(gateway(config), hung, _STREAM, figures)
    assert max(latencies) < 10.0, f"first_byte_timeout_s=1 yet a request took {max(latencies)} s"


def test_hung_backend_non_streaming_fails_over_once_declared_down(
    gateway: StartGateway, raw_engines: RawEngines, figures: Callable[..., None]
) -> None:
    hung, good = raw_engines(misbehaviour.well()), raw_engines(misbehaviour.well())
    gw = gateway(gateway_config([hung.url, good.url]))  # no first-byte timeout for these
    plain = {k: v for k, v in _STREAM.items() if k != "stream"}
    latencies = _hang_one_of_two(gw, hung, plain, figures, health_fails=True)
    assert max(latencies) < 15.0, f"a request waited {max(latencies)} s on the hung backend"


def _hang_one_of_two(
    gw: GatewayProcess,
    hung: RawEngine,
    body: dict[str, object],
    figures: Callable[..., None],
    *,
    health_fails: bool = False,
) -> list[float]:
    """Six requests, then `hung` hangs (and fails its health check if `health_fails`),
    then six more: every one must be answered 200 by the other backend. Their latencies."""
    baseline = [_timed(lambda: chat(gw, json=body)) for _ in range(6)]
    hung.behaviour = misbehaviour.hang
    if health_fails:
        hung.health_status = 503  # a hung engine's health check fails too: declared down
    during = [_timed(lambda: chat(gw, json=body, timeout=30.0)) for _ in range(6)]
    latencies = [t for t, _ in during]
    statuses = [r.status_code if r is not None else None for _, r in during]
    figures(
        lost_not_started=sum(s != 200 for s in statuses),
        p99_baseline_s=round(max(t for t, _ in baseline), 3),
        p99_fault_s=round(max(latencies), 3),
    )
    assert statuses == [200] * 6, f"want every request failed over to the good backend: {statuses}"
    assert_survived(gw)
    return latencies


def _timed(call: Callable[[], httpx.Response]) -> tuple[float, httpx.Response | None]:
    t0 = time.monotonic()
    try:
        resp: httpx.Response | None = call()
    except httpx.HTTPError:
        resp = None
    return time.monotonic() - t0, resp


def test_garbage_sse(gateway: StartGateway, raw_engines: RawEngines) -> None:
    junk, good = raw_engines(misbehaviour.garbage_sse), raw_engines(misbehaviour.well())
    gw = gateway(gateway_config([junk.url, good.url]))
    statuses = []
    for _ in range(6):
        t, resp = _timed(lambda: chat(gw, json={**_STREAM, "max_tokens": 5}, timeout=20.0))
        statuses.append(resp.status_code if resp is not None else None)
        assert t < 15.0, "a garbage stream held its client"
    assert set(statuses) <= {200, 502}, f"garbage SSE gave {statuses}; want 200 or 502"
    assert_survived(gw)


def test_backend_dies_mid_event(
    gateway: StartGateway, raw_engines: RawEngines, figures: Callable[..., None]
) -> None:
    engine = raw_engines(misbehaviour.die_mid_event)
    # Never ejected: every request reaches the dying engine.
    gw = gateway(gateway_config([engine.url], health={"passive_fail_threshold": 1000}))
    verdicts = []
    for i in range(6):
        body = b""
        # With include_usage the gateway relays bytes as they come; without, it filters events.
        payload = {**_STREAM, "stream_options": {"include_usage": True}} if i % 2 else _STREAM
        try:
            with httpx.stream("POST", gw.url + "/v1/chat/completions", json=payload) as resp:
                assert resp.status_code == 200, f"the stream did not start: {resp.status_code}"
                for part in resp.iter_raw():
                    body += part
        except httpx.HTTPError:
            pass  # the cut itself; what arrived is judged
        verdicts.append(judge_stream(body))
    good = [v for v in verdicts if v.well_formed and v.error_event]
    figures(streams_cut=len(verdicts), sse_error_events_ok=len(good))
    assert len(good) == len(verdicts), (
        "every cut stream must end with a well-formed SSE error event (each data event valid "
        f"JSON, the last an error); got {verdicts}"
    )
    assert_survived(gw)


def test_unsolicited_second_response(gateway: StartGateway, raw_engines: RawEngines) -> None:
    engine = raw_engines(misbehaviour.second_response)
    gw = gateway(gateway_config([engine.url]))
    texts = []
    with httpx.Client(base_url=gw.url, timeout=20.0) as client:
        for _ in range(6):
            try:
                resp = client.post("/v1/chat/completions", json=_CHAT)
                texts.append(resp.text)
            except httpx.HTTPError as exc:
                texts.append(f"transport error {exc!r}")
    leaked = [t for t in texts if misbehaviour.UNSOLICITED in t]
    assert not leaked, f"an unsolicited response reached a client: {leaked[0][:300]}"
    assert all('"first"' in t for t in texts), f"want each request its own answer: {texts}"
    assert_survived(gw)


def test_failure_on_reused_connection_is_retried(
    gateway: StartGateway, raw_engines: RawEngines, figures: Callable[..., None]
) -> None:
    flaky, good = raw_engines(misbehaviour.close_on_reuse), raw_engines(misbehaviour.well())
    gw = gateway(gateway_config([flaky.url, good.url]))
    statuses = [chat(gw).status_code for _ in range(8)]
    figures(lost_not_started=sum(s != 200 for s in statuses))
    assert statuses == [200] * 8, (
        f"a reused connection closed before any byte must be retried; got {statuses}"
    )
    assert flaky.posts > 2, "the flaky engine was not exercised"
    assert_survived(gw)


def test_slow_engine(
    gateway: StartGateway, fake_engines: StartEngines, figures: Callable[..., None]
) -> None:
    (slow, s1), (_, s2) = fake_engines(2, tokens=10, token_delay=0.01)
    gw = gateway(gateway_config([s1.url, s2.url]))
    baseline = asyncio.run(run_load(gw.url, 2.0, 6, max_tokens=10))
    slow.ttft_delay, slow.token_delay = 1.5, 0.2
    during = asyncio.run(run_load(gw.url, 5.0, 6, max_tokens=10))
    lost = sum(a.lost_before_streaming for a in during)
    figures(lost_not_started=lost, p99_baseline_s=p99(baseline), p99_fault_s=p99(during))
    failed = [a.status for a in during if not a.ok]
    assert not failed, f"{len(failed)} requests failed with a slow (not dead) engine: {failed}"
    assert_survived(gw)
