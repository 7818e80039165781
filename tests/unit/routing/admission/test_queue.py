"""FairQueue: strict priority between bands, fair shares between tenants, bound, deadlines."""

from __future__ import annotations

from collections import Counter

import pytest

from routing.admission import FairQueue, Ticket

CRITICAL, STANDARD, SHEDDABLE = 0, 1, 2


def _push(q: FairQueue, tenant: str, band: int = STANDARD, now: float = 0.0) -> Ticket:
    ticket = q.push(tenant, band, now, timeout_s=10.0).ticket
    assert ticket is not None
    return ticket


def _drain(q: FairQueue, now: float = 0.0) -> list[Ticket]:
    out = []
    while (t := q.pop(now)) is not None:
        out.append(t)
    return out


def test_higher_band_always_goes_first() -> None:
    q = FairQueue(bands=3, max_queue=10)
    _push(q, "a", SHEDDABLE)
    _push(q, "a", STANDARD)
    _push(q, "a", CRITICAL)
    assert [t.band for t in _drain(q)] == [CRITICAL, STANDARD, SHEDDABLE]


def test_tenants_of_a_band_take_turns_and_each_keeps_its_order() -> None:
    q = FairQueue(bands=3, max_queue=100)
    flood = [_push(q, "a") for _ in range(6)]
    few = [_push(q, "b") for _ in range(2)]
    order = _drain(q)
    assert [t.tenant for t in order] == ["a", "b", "a", "b", "a", "a", "a", "a"]
    assert [t for t in order if t.tenant == "a"] == flood
    assert [t for t in order if t.tenant == "b"] == few


def test_a_light_tenant_gets_all_it_asks_under_contention() -> None:
    """Tenant a floods (9 of 10 arrivals), b sends few; the fleet frees one place per
    arrival. b asks for less than half, so every one of its requests gets in."""
    q = FairQueue(bands=3, max_queue=20)
    served: Counter[str] = Counter()
    sent: Counter[str] = Counter()
    for i in range(1000):
        tenant = "b" if i % 10 == 0 else "a"
        sent[tenant] += 1
        q.push(tenant, STANDARD, i * 0.01, timeout_s=1e9)
        ticket = q.pop(i * 0.01)
        assert ticket is not None
        served[ticket.tenant] += 1
    assert served["b"] == sent["b"]


def test_two_floods_share_equally() -> None:
    q = FairQueue(bands=3, max_queue=50)
    served: Counter[str] = Counter()
    for i in range(2000):
        now = i * 0.01
        for tenant in ("a", "a", "a", "b"):  # a sends three times as much as b
            q.push(tenant, STANDARD, now, timeout_s=1e9)
        for _ in range(2):  # capacity: half of the demand
            ticket = q.pop(now)
            assert ticket is not None
            served[ticket.tenant] += 1
    assert served["a"] == pytest.approx(served["b"], rel=0.02)


def test_the_tenant_admitted_less_recently_goes_first() -> None:
    q = FairQueue(bands=3, max_queue=100, half_life_s=5.0)
    for _ in range(3):
        q.started("a", 0.0)  # three of a's were admitted without waiting
    _push(q, "a")
    _push(q, "b")
    _push(q, "b")
    assert [t.tenant for t in _drain(q)] == ["b", "b", "a"]  # b catches up, then the tie
    assert q.load("a", 0.0) == pytest.approx(4.0)
    assert q.load("a", 5.0) == pytest.approx(2.0)  # half of it after a half-life


def test_full_queue_sheds_the_flooding_arrival_not_the_light_tenant() -> None:
    q = FairQueue(bands=3, max_queue=4)
    for _ in range(4):
        _push(q, "a")
    assert q.push("a", STANDARD, 0.0, 10.0).ticket is None  # a is the most loaded: it pays
    pushed = q.push("b", STANDARD, 0.0, 10.0)
    assert pushed.ticket is not None and pushed.evicted is not None
    assert pushed.evicted.tenant == "a" and not pushed.evicted.queued
    assert len(q) == 4
    assert Counter(t.tenant for t in _drain(q)) == {"a": 3, "b": 1}


def test_a_light_tenant_evicts_a_loaded_one_when_the_deadline_leaves_one_place() -> None:
    q = FairQueue(bands=3, max_queue=100)
    for _ in range(5):
        q.started("a", 0.0)
    queued = _push(q, "a")
    pushed = q.push("b", STANDARD, 0.0, 10.0, limit=1)
    assert pushed.evicted is queued and pushed.ticket is not None
    assert q.push("a", STANDARD, 0.0, 10.0, limit=1).ticket is None  # a is heavier: it pays
    assert q.band_sizes() == [0, 1, 0]


def test_full_queue_evicts_the_newest_of_the_lowest_band_for_a_higher_arrival() -> None:
    q = FairQueue(bands=3, max_queue=3)
    _push(q, "a", STANDARD)
    old = _push(q, "a", SHEDDABLE)
    new = _push(q, "a", SHEDDABLE)
    pushed = q.push("a", CRITICAL, 0.0, 10.0)
    assert pushed.evicted is new
    assert old.queued
    assert [t.band for t in _drain(q)] == [CRITICAL, STANDARD, SHEDDABLE]


def test_full_queue_sheds_an_arrival_below_every_waiting_band() -> None:
    q = FairQueue(bands=3, max_queue=2)
    _push(q, "a", CRITICAL)
    _push(q, "b", CRITICAL)
    pushed = q.push("c", SHEDDABLE, 0.0, 10.0)
    assert pushed.ticket is None and pushed.evicted is None
    assert len(q) == 2


def test_limit_never_exceeds_max_queue_and_zero_sheds_everything() -> None:
    q = FairQueue(bands=1, max_queue=1)
    _push(q, "a", 0)
    assert q.push("a", 0, 0.0, 1.0, limit=10).ticket is None
    assert FairQueue(bands=1, max_queue=0).push("a", 0, 0.0, 1.0).ticket is None


def test_expire_removes_only_overdue_requests() -> None:
    q = FairQueue(bands=3, max_queue=10)
    early = q.push("a", STANDARD, 0.0, timeout_s=1.0).ticket
    late = q.push("a", STANDARD, 0.0, timeout_s=5.0).ticket
    assert q.expire(1.0) == []  # at the deadline it still waits
    assert q.expire(1.5) == [early]
    assert late is not None and late.queued and len(q) == 1
    assert q.pop(1.5) is late
    assert q.expire(100.0) == []  # a popped request never expires


def test_remove_takes_a_request_out_once() -> None:
    q = FairQueue(bands=3, max_queue=10)
    first, middle, last = _push(q, "a"), _push(q, "a"), _push(q, "a")
    assert q.remove(middle)
    assert not q.remove(middle)
    assert _drain(q) == [first, last]
    assert q.expire(1e9) == []


def test_deadline_heap_stays_small_under_churn() -> None:
    q = FairQueue(bands=1, max_queue=10)
    for i in range(10_000):
        t = _push(q, "a", 0, float(i))
        q.remove(t)
    assert len(q._deadlines) <= 64 + 2


def test_needs_a_band() -> None:
    with pytest.raises(ValueError):
        FairQueue(bands=0, max_queue=1)
