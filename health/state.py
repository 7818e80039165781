"""Health state machine of one backend: active probes plus passive ejection with backoff.

Active: `fail_threshold` consecutive failed probes make a backend UNHEALTHY;
`success_threshold` consecutive good probes make it HEALTHY again.
Passive: `passive_fail_threshold` consecutive upstream failures eject it for
`ejection_base_s × 2^(n−1)` seconds (capped at `ejection_max_s`), n counting ejections since
the last success. After the backoff it is re-admitted; one more failure ejects it again for
longer, and a success resets the count. Time comes from the caller (injected clock).
"""

from __future__ import annotations

from dataclasses import dataclass

from routing.types import Health


@dataclass(frozen=True, slots=True)
class HealthPolicy:
    fail_threshold: int = 3
    success_threshold: int = 2
    passive_fail_threshold: int = 3
    ejection_base_s: float = 5.0
    ejection_max_s: float = 300.0


class HealthState:
    """Mutable health record of one backend. Not thread-safe; owned by the event loop."""

    def __init__(self, policy: HealthPolicy) -> None:
        self._policy = policy
        # Public to read (the pool's snapshot check reads both every request, without a
        # call); changed only by this class.
        self.probed: Health = Health.UNKNOWN
        self._probe_fails = 0
        self._probe_oks = 0
        self._upstream_fails = 0
        self._ejections = 0
        self.ejected_until_s = 0.0
        self.last_error: str | None = None

    @property
    def policy(self) -> HealthPolicy:
        return self._policy

    @policy.setter
    def policy(self, policy: HealthPolicy) -> None:
        """New thresholds apply from the next probe or upstream result (a config reload)."""
        self._policy = policy

    def health(self, now: float) -> Health:
        if now < self.ejected_until_s:
            return Health.EJECTED
        return self.probed

    def ejected_until(self) -> float:
        return self.ejected_until_s

    def record_probe(self, ok: bool, now: float, error: str | None = None) -> None:
        del now  # probes change state by count, not by time
        if ok:
            self._probe_fails = 0
            self._probe_oks += 1
            if self.probed is Health.UNKNOWN or self._probe_oks >= self._policy.success_threshold:
                self.probed = Health.HEALTHY
            return
        self.last_error = error
        self._probe_oks = 0
        self._probe_fails += 1
        if self.probed is Health.UNKNOWN or self._probe_fails >= self._policy.fail_threshold:
            self.probed = Health.UNHEALTHY

    def record_upstream_success(self) -> None:
        self._upstream_fails = 0
        self._ejections = 0

    def record_upstream_failure(self, now: float, error: str) -> bool:
        """Count one failed upstream request; returns True if this ejected the backend."""
        self.last_error = error
        if now < self.ejected_until_s:
            return False
        self._upstream_fails += 1
        # Once re-admitted after an ejection, a single failure ejects again.
        threshold = 1 if self._ejections else self._policy.passive_fail_threshold
        if self._upstream_fails < threshold:
            return False
        self._ejections += 1
        # Exponent capped: 2**1024 no longer converts to float (OverflowError).
        backoff = self._policy.ejection_base_s * 2 ** min(self._ejections - 1, 64)
        self.ejected_until_s = now + min(backoff, self._policy.ejection_max_s)
        self._upstream_fails = 0
        return True
