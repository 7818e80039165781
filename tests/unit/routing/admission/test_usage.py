"""TenantUsage: decayed admission counts and the reserve kept from tenants above their share."""

from __future__ import annotations

import pytest

from routing.admission import TenantUsage


def _usage(**counts: int) -> TenantUsage:
    u = TenantUsage(half_life_s=5.0)
    for tenant, n in counts.items():
        for _ in range(n):
            u.add(tenant, 0.0)
    return u


def test_counts_halve_every_half_life() -> None:
    u = _usage(a=8)
    assert u.get("a", 0.0) == pytest.approx(8.0)
    assert u.get("a", 10.0) == pytest.approx(2.0)
    assert u.get("nobody", 3.0) == 0.0


def test_the_reserve_is_kept_from_tenants_above_a_lighter_active_one() -> None:
    u = _usage(heavy=30, medium=28, light=10)
    assert u.reserve_against("heavy", 0.0)
    assert u.reserve_against("medium", 0.0)
    assert not u.reserve_against("light", 0.0)
    assert not u.reserve_against("newcomer", 0.0)


def test_no_reserve_between_equals_or_for_a_single_tenant() -> None:
    assert not _usage(a=20, b=20).reserve_against("a", 0.0)
    assert _usage(a=20, b=19).reserve_against("a", 0.0)  # the one above the mean waits
    assert not _usage(a=20, b=19).reserve_against("b", 0.0)
    assert not _usage(a=20).reserve_against("a", 0.0)


def test_a_light_tenant_that_stopped_holds_nothing_back() -> None:
    u = _usage(heavy=30, light=10)
    assert u.reserve_against("heavy", 1.0)
    assert not u.reserve_against("heavy", 2.5)  # light's last admission is 2.5 s old


def test_tiny_counts_are_dropped() -> None:
    u = TenantUsage(half_life_s=1.0)
    for i in range(5000):
        u.add(f"tenant-{i}", float(i))  # a client inventing tenant names
    assert len(u) < 200


def test_half_life_is_checked() -> None:
    with pytest.raises(ValueError):
        TenantUsage(half_life_s=0.0)
