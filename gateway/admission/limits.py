"""A key's requests/tokens per minute, checked before it queues, answered as OpenAI does.

Over a limit: 429 with `type` `requests` or `tokens` and `code` `rate_limit_exceeded`, a
`Retry-After` of the whole seconds until the bucket holds enough, and OpenAI's headers for
each limited bucket: `x-ratelimit-limit-*`, `x-ratelimit-remaining-*` and
`x-ratelimit-reset-*` (time until the bucket is full, written like OpenAI's `1s`, `6m0s`,
`120ms`).
"""

from __future__ import annotations

import math

from gateway.admission.identity import Identity
from gateway.admission.metrics import AdmissionMetrics
from gateway.errors import KeyRateLimitError
from routing.admission import KeyLimiter, LimitState

_PER_MIN = {"requests": "requests per min (RPM)", "tokens": "tokens per min (TPM)"}


def check_limits(
    limiter: KeyLimiter, who: Identity, tokens: int, now: float, metrics: AdmissionMetrics
) -> list[LimitState]:
    """Take the request from its key's buckets, or raise `KeyRateLimitError`."""
    assert who.key is not None
    states = limiter.take(who.key, who.requests_per_minute, who.tokens_per_minute, tokens, now)
    refused = [s for s in states if s.wait_s > 0]
    if not refused:
        return states
    worst = max(refused, key=lambda s: s.wait_s)
    metrics.shed_by(f"rate_limit_{worst.kind}").inc()
    wait = math.ceil(worst.wait_s)
    raise KeyRateLimitError(
        f"Rate limit reached on {_PER_MIN[worst.kind]}: limit {worst.limit}, "
        f"remaining {worst.remaining}, requested {1 if worst.kind == 'requests' else tokens}. "
        f"Please try again in {format_duration(worst.wait_s)}.",
        retry_after_s=wait,
        extra_headers=ratelimit_headers(states),
        type_=worst.kind,
    )


def ratelimit_headers(states: list[LimitState]) -> list[tuple[bytes, bytes]]:
    out = []
    for s in states:
        out.append((f"x-ratelimit-limit-{s.kind}".encode(), str(s.limit).encode()))
        out.append((f"x-ratelimit-remaining-{s.kind}".encode(), str(s.remaining).encode()))
        out.append((f"x-ratelimit-reset-{s.kind}".encode(), format_duration(s.reset_s).encode()))
    return out


def format_duration(seconds: float) -> str:
    """OpenAI's way: `120ms` below a second, `1.5s` below a minute, else `6m0s`."""
    if seconds < 1.0:
        return f"{math.ceil(seconds * 1000)}ms"
    if seconds < 60.0:
        return f"{math.ceil(seconds * 1000) / 1000:g}s"
    minutes, rest = divmod(math.ceil(seconds), 60)
    return f"{minutes}m{rest}s"
