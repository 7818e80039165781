"""Per-key limits on requests and tokens per minute, as token buckets.

A bucket of size `per_minute` refills at `per_minute / 60` per second. A request takes 1 from
its key's request bucket and its estimated prompt tokens from the token bucket; it is refused
(nothing taken) when either holds less than it needs, and told the time until it would hold
enough. A need above the bucket's size counts as the whole bucket, so a large request waits
for a full bucket instead of being refused for ever. Once the answer's usage is known,
`correct` charges the difference between the tokens it really used and the estimate; a
bucket may go below zero then, and the key waits until it has refilled.

The figures in `LimitState` are what OpenAI's `x-ratelimit-*` headers carry: the limit, what
remains, and the time until the bucket is full again.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


class TokenBucket:
    """`per_minute` units, refilled continuously; starts full."""

    def __init__(self, per_minute: float, now: float) -> None:
        self.per_minute = per_minute
        self.level = float(per_minute)
        self._at = now

    @property
    def rate(self) -> float:
        return self.per_minute / 60.0

    def refill(self, now: float) -> None:
        if now > self._at:
            self.level = min(self.per_minute, self.level + (now - self._at) * self.rate)
            self._at = now

    def wait_s(self, need: float, now: float) -> float:
        """Seconds until `need` units are there (0: now)."""
        self.refill(now)
        need = min(need, self.per_minute)
        return 0.0 if self.level >= need else (need - self.level) / self.rate

    def charge(self, amount: float, now: float) -> None:
        self.refill(now)
        self.level = min(self.per_minute, self.level - amount)

    def reset_s(self, now: float) -> float:
        """Seconds until the bucket is full."""
        self.refill(now)
        return (self.per_minute - self.level) / self.rate


@dataclass(frozen=True, slots=True)
class LimitState:
    """One bucket's figures for the response headers, and whether it refused."""

    kind: str  # "requests" | "tokens"
    limit: int
    remaining: int
    reset_s: float
    wait_s: float  # 0 unless this bucket refused the request


class KeyLimiter:
    """The request and token buckets of every key that has limits."""

    def __init__(self) -> None:
        self._buckets: dict[tuple[str, str], TokenBucket] = {}

    def take(
        self, key: str, rpm: int | None, tpm: int | None, tokens: int, now: float
    ) -> list[LimitState]:
        """Take one request and `tokens` from `key`'s buckets if both have enough; the
        states of the limited buckets (a refusing one has `wait_s` > 0)."""
        wanted = self._wants(rpm, tpm, tokens)
        buckets = [
            (kind, self._bucket(key, kind, limit, now), need) for kind, limit, need in wanted
        ]
        waits = [bucket.wait_s(need, now) for _, bucket, need in buckets]
        if not any(waits):
            for _, bucket, need in buckets:
                bucket.charge(need, now)
        return [
            _state(kind, bucket, wait, now)
            for (kind, bucket, _), wait in zip(buckets, waits, strict=True)
        ]

    def refund(self, key: str, tokens: int, now: float) -> None:
        """Give back what `take` took for a request that was never served."""
        for kind, amount in (("requests", 1), ("tokens", tokens)):
            bucket = self._buckets.get((key, kind))
            if bucket is not None:
                bucket.charge(-amount, now)

    def correct(self, key: str, estimated: int, used: int, now: float) -> None:
        """Charge the tokens a served request used beyond (or below) its estimate."""
        bucket = self._buckets.get((key, "tokens"))
        if bucket is not None:
            bucket.charge(used - estimated, now)

    @staticmethod
    def _wants(rpm: int | None, tpm: int | None, tokens: int) -> list[tuple[str, int, int]]:
        out = []
        if rpm is not None:
            out.append(("requests", rpm, 1))
        if tpm is not None:
            out.append(("tokens", tpm, tokens))
        return out

    def _bucket(self, key: str, kind: str, limit: int, now: float) -> TokenBucket:
        bucket = self._buckets.get((key, kind))
        if bucket is None or bucket.per_minute != limit:  # new key, or its limit changed
            bucket = self._buckets[(key, kind)] = TokenBucket(limit, now)
        return bucket


def _state(kind: str, bucket: TokenBucket, wait_s: float, now: float) -> LimitState:
    return LimitState(
        kind=kind,
        limit=int(bucket.per_minute),
        remaining=max(0, math.floor(bucket.level)),
        reset_s=bucket.reset_s(now),
        wait_s=wait_s,
    )
