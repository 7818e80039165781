"""`ServiceRate`: how fast admitted requests finish, hence how long a queued one waits.

Formula (Little's law over the requests in service): with `n` requests admitted and not yet
finished and a mean service time `s` (an exponentially weighted mean of admission-to-release
times, weight `alpha` for each new one), requests leave at `n / s` per second, so one with
`k` requests ahead of it waits about

    wait(k) = (k + 1) · s / max(n, 1)

and `drained_within(t)` = `floor(t · n / s)` requests reach service within `t` seconds. The
queue is only non-empty while the fleet is full, and then `n` is the fleet's capacity, so the
estimates hold when they are used. Unknown (None) until a first request has finished.
"""

from __future__ import annotations

import math


class ServiceRate:
    """Counts the requests in service and learns their mean service time."""

    def __init__(self, alpha: float = 0.1) -> None:
        if not 0.0 < alpha <= 1.0:
            raise ValueError("alpha must be in (0, 1]")
        self.alpha = alpha
        self.in_service = 0
        self.mean_s: float | None = None

    def started(self) -> None:
        self.in_service += 1

    def finished(self, duration_s: float) -> None:
        """A request left service after `duration_s` (0 for one that never ran: no sample)."""
        self.in_service = max(0, self.in_service - 1)
        if duration_s <= 0.0 or not math.isfinite(duration_s):
            return
        if self.mean_s is None:
            self.mean_s = duration_s
        else:
            self.mean_s += self.alpha * (duration_s - self.mean_s)

    def wait_s(self, ahead: int) -> float | None:
        """The expected wait of a request with `ahead` requests before it; None: unknown."""
        if self.mean_s is None:
            return None
        return (ahead + 1) * self.mean_s / max(self.in_service, 1)

    def drained_within(self, seconds: float) -> int | None:
        """How many queued requests reach service within `seconds`; None: unknown."""
        if self.mean_s is None:
            return None
        return math.floor(seconds * max(self.in_service, 1) / self.mean_s)

    def retry_after_s(self, ahead: int, fallback_s: float = 1.0) -> int:
        """Whole seconds to tell a turned-away client (at least 1): the wait it would have."""
        wait = self.wait_s(ahead)
        return max(1, math.ceil(fallback_s if wait is None else wait))
