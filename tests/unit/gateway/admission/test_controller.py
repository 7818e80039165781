"""AdmissionController: admit, queue, wake, expire, shed, leave, limit — on a fake clock."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from gateway.admission.controller import AdmissionController
from gateway.admission.metrics import AdmissionMetrics
from gateway.asgi import Message
from gateway.errors import KeyRateLimitError, QueueTimeoutError, ShedError
from gateway.request_record import RequestRecord
from gateway.usage import Usage
from health.pool import BackendPool, BackendSpec
from health.state import HealthPolicy
from routing.admission import InFlightCap
from routing.admission.objectives import Objectives
from routing.config.schema import AdmissionSection


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@dataclass(frozen=True)
class Principal:
    name: str
    tier: str = "default"
    requests_per_minute: int | None = None
    tokens_per_minute: int | None = None


class Client:
    """A request's ASGI side: `leave()` makes `receive` report the disconnect."""

    def __init__(self) -> None:
        self._gone = asyncio.Event()

    async def receive(self) -> Message:
        await self._gone.wait()
        return {"type": "http.disconnect"}

    def leave(self) -> None:
        self._gone.set()


def _controller(
    clock: Clock,
    cap: int = 1,
    backends: int = 1,
    objectives: Objectives | None = None,
    **section: Any,
) -> AdmissionController:
    pool = BackendPool(
        [BackendSpec(url=f"http://b{i}:8000") for i in range(backends)], HealthPolicy(), clock
    )
    for b in pool:
        b.state.record_probe(True, clock())
    sec = AdmissionSection(**section)
    metrics = AdmissionMetrics(CollectorRegistry(), sec.bands)
    return AdmissionController(
        sec,
        pool,
        InFlightCap(cap),
        clock,
        metrics,
        chars_per_token=4.0,
        tick_s=0.05,
        objectives=objectives,
    )


def _rec() -> RequestRecord:
    return RequestRecord(request_id="r", method="POST", path="/v1/completions", started=0.0)


class Request:
    """One request through the controller, as the app drives it."""

    def __init__(
        self,
        ctl: AdmissionController,
        headers: dict[str, str] | None = None,
        principal: Any = None,
        body_bytes: int = 400,
    ) -> None:
        self.ctl = ctl
        self.scope: dict[str, Any] = {"type": "http"}
        if principal is not None:
            self.scope["kvgate.principal"] = principal
        self.headers = headers or {}
        self.client = Client()
        self.rec = _rec()
        self.body_bytes = body_bytes

    async def acquire(self) -> bool:
        return await self.ctl.acquire(
            self.scope, self.client.receive, self.headers, self.body_bytes, self.rec
        )

    def start(self) -> asyncio.Task[bool]:
        return asyncio.ensure_future(self.acquire())

    def release(self) -> None:
        self.ctl.release(self.scope, self.rec)


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_admitted_at_once_while_there_is_room() -> None:
    ctl = _controller(Clock(), cap=2)
    a, b = Request(ctl), Request(ctl)
    assert await a.acquire() and await b.acquire()
    assert ctl.admitted == 2 and len(ctl.queue) == 0
    a.release()
    b.release()
    assert ctl.admitted == 0
    a.release()  # a second release is a no-op
    assert ctl.admitted == 0


async def test_a_queued_request_is_admitted_when_a_place_is_released() -> None:
    clock = Clock()
    ctl = _controller(clock, cap=1)
    first, second = Request(ctl), Request(ctl)
    assert await first.acquire()
    waiting = second.start()
    await _settle()
    assert not waiting.done() and len(ctl.queue) == 1
    clock.now += 2.0
    first.release()
    assert await waiting
    assert ctl.admitted == 1 and len(ctl.queue) == 0
    assert ctl.rate.mean_s == pytest.approx(2.0)  # it learnt the service time


async def test_waiting_past_the_deadline_is_a_503_with_retry_after() -> None:
    clock = Clock()
    ctl = _controller(clock, cap=1, queue_timeout_s=5.0)
    assert await Request(ctl).acquire()
    waiting = Request(ctl).start()
    await _settle()
    clock.now += 5.5
    ctl.pump()
    with pytest.raises(QueueTimeoutError) as info:
        await waiting
    assert info.value.status == 503 and info.value.headers()[0][0] == b"retry-after"
    assert len(ctl.queue) == 0 and ctl.admitted == 1


async def test_a_client_that_leaves_while_queued_leaves_the_queue() -> None:
    ctl = _controller(Clock(), cap=1)
    holder, leaver = Request(ctl), Request(ctl)
    assert await holder.acquire()
    waiting = leaver.start()
    await _settle()
    leaver.client.leave()
    assert await waiting is False
    assert leaver.rec.client_gone
    assert len(ctl.queue) == 0
    holder.release()
    assert ctl.admitted == 0  # nobody was granted the place the leaver would have had
    assert ctl._metrics.cancelled._value.get() == 1


async def test_the_queue_length_gauges_follow_the_queue_back_to_zero() -> None:
    ctl = _controller(Clock(), cap=1)
    holder, leaver = Request(ctl), Request(ctl)
    assert await holder.acquire()
    assert _queued(ctl) == 0
    waiting = leaver.start()
    await _settle()
    assert _queued(ctl) == 1
    leaver.client.leave()
    assert await waiting is False  # left the queue without a pump
    holder.release()  # the next pump shows the empty queue
    assert _queued(ctl) == 0
    assert await holder.acquire()  # and nothing else stays hidden behind that
    holder.release()
    assert _queued(ctl) == 0


def _queued(ctl: AdmissionController) -> float:
    family = ctl._metrics.queue_length.collect()[0]
    return sum(sample.value for sample in family.samples)


async def test_a_full_queue_sheds_with_429_and_retry_after() -> None:
    clock = Clock()
    ctl = _controller(clock, cap=1, max_queue=1)
    holder = Request(ctl)
    assert await holder.acquire()
    clock.now += 3.0
    holder.release()  # a service time of 3 s learnt
    assert await Request(ctl).acquire()
    queued = Request(ctl, {"x-t": "a"}).start()
    await _settle()
    with pytest.raises(ShedError) as info:
        await Request(ctl).acquire()
    assert info.value.status == 429 and info.value.code == "overloaded"
    assert dict(info.value.headers())[b"retry-after"] == b"6"  # two ahead, 3 s each
    queued.cancel()
    with pytest.raises(asyncio.CancelledError):
        await queued


async def test_a_higher_band_evicts_a_queued_sheddable_request() -> None:
    ctl = _controller(Clock(), cap=1, max_queue=1, priority_header="x-priority")
    assert await Request(ctl).acquire()
    low = Request(ctl, {"x-priority": "sheddable"}).start()
    await _settle()
    high = Request(ctl, {"x-priority": "critical"}).start()
    await _settle()
    with pytest.raises(ShedError):
        await low
    assert not high.done() and ctl.queue.band_sizes() == [1, 0, 0]
    high.cancel()
    with pytest.raises(asyncio.CancelledError):
        await high


async def test_an_expected_wait_beyond_the_deadline_is_shed_at_once() -> None:
    clock = Clock()
    ctl = _controller(clock, cap=1, queue_timeout_s=5.0)
    r = Request(ctl)
    assert await r.acquire()
    clock.now += 4.0
    r.release()  # 4 s per request, one at a time
    assert await Request(ctl).acquire()
    queued = Request(ctl, {}).start()  # expects 4 s: fits
    await _settle()
    assert not queued.done()
    with pytest.raises(ShedError) as info:
        await Request(ctl).acquire()  # expects 8 s
    assert dict(info.value.headers())[b"retry-after"] == b"8"
    queued.cancel()
    with pytest.raises(asyncio.CancelledError):
        await queued


async def test_fair_turns_between_tenants_when_places_come_back() -> None:
    ctl = _controller(Clock(), cap=1, tenant_header="x-tenant")
    holder = Request(ctl)
    assert await holder.acquire()
    order: list[str] = []

    async def one(tenant: str) -> None:
        r = Request(ctl, {"x-tenant": tenant})
        assert await r.acquire()
        order.append(tenant)
        await asyncio.sleep(0)
        r.release()

    tasks = [asyncio.ensure_future(one("a")) for _ in range(4)]
    tasks += [asyncio.ensure_future(one("b")) for _ in range(2)]
    await _settle()
    holder.release()
    await asyncio.gather(*tasks)
    assert order == ["a", "b", "a", "b", "a", "a"]


async def test_the_last_place_is_kept_for_a_lighter_tenant() -> None:
    clock = Clock()
    ctl = _controller(clock, cap=4, backends=2, tenant_header="x-tenant")
    light = Request(ctl, {"x-tenant": "light"})
    assert await light.acquire()
    light.release()
    held = []
    for _ in range(7):  # the heavy tenant fills seven of eight places
        r = Request(ctl, {"x-tenant": "heavy"})
        assert await r.acquire()
        held.append(r)
    clock.now += 0.5
    last = Request(ctl, {"x-tenant": "heavy"}).start()
    await _settle()
    assert not last.done()  # the eighth waits: a lighter tenant is active
    assert await Request(ctl, {"x-tenant": "light"}).acquire()  # and finds it free
    held[0].release()
    await _settle()
    assert not last.done()  # one place back: kept for light again
    held[1].release()
    assert await last  # two back: heavy may take all but the last
    clock.now += 10.0
    held[2].release()
    assert await Request(ctl, {"x-tenant": "heavy"}).acquire()  # light went quiet: no reserve


async def test_a_key_over_its_requests_per_minute_gets_openai_429() -> None:
    ctl = _controller(Clock(), cap=10)
    key = Principal("team-a", requests_per_minute=2)
    assert await Request(ctl, principal=key).acquire()
    assert await Request(ctl, principal=key).acquire()
    with pytest.raises(KeyRateLimitError) as info:
        await Request(ctl, principal=key).acquire()
    err = info.value
    assert (err.status, err.type, err.code) == (429, "requests", "rate_limit_exceeded")
    headers = dict(err.headers())
    assert headers[b"retry-after"] == b"30"
    assert headers[b"x-ratelimit-limit-requests"] == b"2"
    assert headers[b"x-ratelimit-remaining-requests"] == b"0"
    assert headers[b"x-ratelimit-reset-requests"] == b"1m0s"
    assert await Request(ctl, principal=Principal("team-b", requests_per_minute=2)).acquire()


async def test_a_shed_request_costs_its_key_nothing() -> None:
    ctl = _controller(Clock(), cap=1, max_queue=0)
    key = Principal("k", requests_per_minute=2)
    assert await Request(ctl, principal=key).acquire()
    with pytest.raises(ShedError):
        await Request(ctl, principal=key).acquire()
    ctl.admitted = 0  # the fleet has room again
    assert await Request(ctl, principal=key).acquire()


async def test_tokens_are_corrected_by_the_usage_the_answer_reported() -> None:
    ctl = _controller(Clock(), cap=10)
    key = Principal("k", tokens_per_minute=1000)
    r = Request(ctl, principal=key, body_bytes=400)  # estimated 100 tokens
    assert await r.acquire()
    r.rec.usage = Usage(prompt_tokens=300, cached_tokens=None, completion_tokens=650)
    r.release()
    with pytest.raises(KeyRateLimitError) as info:
        await Request(ctl, principal=key, body_bytes=400).acquire()  # 50 left, 100 asked
    assert info.value.type == "tokens"
    assert dict(info.value.headers())[b"x-ratelimit-remaining-tokens"] == b"50"


async def test_disabled_admits_everything() -> None:
    ctl = _controller(Clock(), cap=1, enabled=False)
    for _ in range(5):
        assert await Request(ctl).acquire()
    assert ctl.admitted == 0


def test_state_for_the_admin_api() -> None:
    ctl = _controller(Clock())
    assert ctl.state() == {
        "enabled": True,
        "queue": {"critical": 0, "standard": 0, "sheddable": 0},
        "admitted": 0,
        "mean_service_s": None,
    }


OBJECTIVES = Objectives({"premium": 1, "batch": -1})
PREMIUM = {"x-llm-d-inference-objective": "premium"}
BATCH = {"x-llm-d-inference-objective": "batch"}


async def test_sheddable_requests_leave_the_held_back_places_to_the_other_bands() -> None:
    clock = Clock()
    ctl = _controller(clock, cap=5, backends=2, objectives=OBJECTIVES)  # 10 places, 2 held back
    batch = [Request(ctl, BATCH) for _ in range(8)]
    for r in batch:
        assert await r.acquire()
    late = Request(ctl, BATCH).start()
    await _settle()
    assert not late.done() and ctl.queue.band_sizes() == [0, 0, 1]
    assert await Request(ctl, PREMIUM).acquire()  # at once, past the waiting sheddable one
    assert await Request(ctl).acquire()  # a standard one too: the last held-back place
    batch[0].release()
    batch[1].release()
    await _settle()
    assert not late.done()  # 2 free: the held-back places
    batch[2].release()
    assert await asyncio.wait_for(late, 1.0)


async def test_a_sheddable_request_at_its_deadline_is_shed_with_the_ttl_reason() -> None:
    clock = Clock()
    ctl = _controller(clock, cap=1, objectives=OBJECTIVES, queue_timeout_s=5.0)
    assert await Request(ctl).acquire()
    sheddable = Request(ctl, BATCH).start()
    standard = Request(ctl).start()
    await _settle()
    clock.now += 5.5
    ctl.pump()
    with pytest.raises(ShedError) as shed:
        await sheddable
    with pytest.raises(QueueTimeoutError) as late:
        await standard
    assert shed.value.status == 429
    assert dict(shed.value.headers())[b"x-llm-d-request-dropped-reason"] == b"rejected-ttl-expired"
    assert late.value.status == 503
    assert dict(late.value.headers())[b"x-llm-d-request-dropped-reason"] == b"rejected-ttl-expired"
    assert ctl._metrics.shed_by("sheddable_timeout")._value.get() == 1


async def test_a_full_queue_names_the_saturation_in_the_dropped_reason() -> None:
    ctl = _controller(Clock(), cap=1, max_queue=0)
    assert await Request(ctl).acquire()
    with pytest.raises(ShedError) as info:
        await Request(ctl).acquire()
    assert dict(info.value.headers())[b"x-llm-d-request-dropped-reason"] == b"rejected-saturated"


async def test_admit_without_a_watch_leaves_the_queue_when_the_caller_is_cancelled() -> None:
    ctl = _controller(Clock(), cap=1, tenant_header="x-t")
    first = await ctl.admit(ctl.identify({}, {}), 400)
    assert first is not None
    waiting = asyncio.ensure_future(ctl.admit(ctl.identify({}, {"x-t": "b"}), 400))
    await _settle()
    assert len(ctl.queue) == 1
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert len(ctl.queue) == 0
    ctl.give_back(first, None)
    assert ctl.admitted == 0
    ctl.give_back(None, None)  # a request that had no place: nothing to give back
    assert ctl.admitted == 0
