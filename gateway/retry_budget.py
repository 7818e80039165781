"""The retry budget: failover retries may add at most a fraction to upstream traffic.

Rule (Finagle's and Linkerd's retry budget): over the last `WINDOW_S` seconds,

    retries made  <  min_per_s × WINDOW_S  +  ratio × requests

so with the defaults (ratio 0.2, min_per_s 5) a steady 100 requests/s may retry 25 times a
second, and an idle gateway still retries its occasional failure. When every backend fails,
retries stop once the budget is spent instead of multiplying the outage's load by
`max_attempts`; a request denied a retry gets its own error.

Counts are kept in one-second buckets (a ring of `WINDOW_S`), with running totals, so each
request costs one increment. Time comes from the caller (an injected clock): no I/O, no
wall clock.
"""

from __future__ import annotations

from collections.abc import Callable

WINDOW_S = 10


class RetryBudget:
    """Counts requests and retries over a sliding window; says whether one more retry fits."""

    __slots__ = ("_clock", "_ratio", "_requests", "_reserve", "_retries", "_second", "_totals")

    def __init__(self, ratio: float, min_per_s: float, clock: Callable[[], float]) -> None:
        self._ratio = ratio
        self._reserve = min_per_s * WINDOW_S
        self._clock = clock
        self._requests = [0] * WINDOW_S
        self._retries = [0] * WINDOW_S
        self._totals = [0, 0]  # requests, retries over the window
        self._second: int | None = None  # the bucket of the latest count

    def record_request(self) -> None:
        """One original request (not a retry) was sent upstream."""
        i = self._advance()
        self._requests[i] += 1
        self._totals[0] += 1

    def try_retry(self) -> bool:
        """Take one retry from the budget; False (nothing taken) if it is spent."""
        i = self._advance()
        requests, retries = self._totals
        if retries + 1 > self._reserve + self._ratio * requests:
            return False
        self._retries[i] += 1
        self._totals[1] += 1
        return True

    def _advance(self) -> int:
        """The current second's bucket, after emptying those that left the window."""
        now = int(self._clock())
        last = self._second
        if last is None or now - last >= WINDOW_S or now < last:  # long idle, or clock reset
            self._requests = [0] * WINDOW_S
            self._retries = [0] * WINDOW_S
            self._totals = [0, 0]
        else:
            for second in range(last + 1, now + 1):
                j = second % WINDOW_S
                self._totals[0] -= self._requests[j]
                self._totals[1] -= self._retries[j]
                self._requests[j] = self._retries[j] = 0
        self._second = now
        return now % WINDOW_S
