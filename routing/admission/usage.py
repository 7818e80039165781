"""`TenantUsage`: each tenant's recent admissions, the measure fair sharing works on.

A tenant's usage is its count of admitted requests, halving every `half_life_s`: about its
admission rate times `half_life_s / ln 2`. Fairness is max-min over those rates: a tenant
asking for less than an equal share keeps a lower usage than the others; tenants asking for
more converge to equal ones.

`reserve_against(t)`: t's usage is at least `margin` (1: the mean itself) times the mean usage
of the active tenants (usage of at least `active` admissions, the last one less than `recent_s`
ago) while some active tenant's is below that; the gateway then keeps the fleet's last place
(the reserve) out of t's reach, so the light tenant's next request finds it free instead of
waiting for a place to come back. A light tenant that stops stops counting after `recent_s`.

Counts too small to matter are dropped now and then, so client-chosen tenant names cannot
grow the table without bound.
"""

from __future__ import annotations

import math


class TenantUsage:
    """Per-tenant admission counts with exponential decay (all calls take `now`)."""

    def __init__(
        self, half_life_s: float, margin: float = 1.0, active: float = 0.5, recent_s: float = 2.0
    ) -> None:
        if half_life_s <= 0:
            raise ValueError("half_life_s must be > 0")
        self._rate = math.log(2) / half_life_s
        self._recent_s = recent_s
        self._margin = margin
        self._active = active
        self._counts: dict[str, tuple[float, float]] = {}  # tenant -> (count, at)
        self._prune_at = 64

    def __len__(self) -> int:
        return len(self._counts)

    def get(self, tenant: str, now: float) -> float:
        count, at = self._counts.get(tenant, (0.0, now))
        return count * math.exp(-self._rate * max(0.0, now - at))

    def add(self, tenant: str, now: float) -> None:
        self._counts[tenant] = (self.get(tenant, now) + 1.0, now)
        if len(self._counts) > self._prune_at:
            counts = self._counts
            self._counts = {t: ca for t, ca in counts.items() if self.get(t, now) > 0.01}
            self._prune_at = 2 * len(self._counts) + 64

    def reserve_against(self, tenant: str, now: float) -> bool:
        """Whether `tenant` must leave the last place to a lighter active tenant."""
        usages = [
            u
            for t, (_, at) in self._counts.items()
            if now - at < self._recent_s and (u := self.get(t, now)) >= self._active
        ]
        if len(usages) < 2:
            return False
        bar = self._margin * sum(usages) / len(usages)
        return self.get(tenant, now) >= bar and min(usages) < bar
