"""The changes one gateway makes to its routing state, as the others apply them (`mirror`).

| event        | the others                                                    |
|--------------|---------------------------------------------------------------|
| `Placement`  | record `hashes` for `backend`, bounded by its KV size         |
| `Withdrawal` | drop `hashes[start:]` for `backend` (a failed attempt)        |
| `Eviction`   | evict `weight` base blocks of its oldest entries but `hashes` |
| `Forget`     | forget everything about `backend`'s cache (it went down)      |
| `TtftPoints` | teach their TTFT model each `(backend, work tokens, ttft s)`  |

Pure values; the gateway's wire form is `gateway.state.codec`, the simulator passes them as is.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Placement:
    """A request with these block hashes went to `backend` (from gateway `gateway`)."""

    gateway: str
    backend: str
    block_chars: int
    hashes: tuple[int, ...]
    at_ms: float  # wall clock when dispatched
    tokens: int | None = None  # its predicted uncached prompt tokens (None: not sent)


@dataclass(frozen=True, slots=True)
class Withdrawal:
    """`backend` did not take the request after all: it holds none of `hashes[start:]`."""

    gateway: str
    backend: str
    block_chars: int
    hashes: tuple[int, ...]
    start: int
    at_ms: float


@dataclass(frozen=True, slots=True)
class Eviction:
    """`backend` evidently evicted `weight` base blocks the index counted as held (its
    answer said so); `hashes` (the request's own, held again) are spared."""

    gateway: str
    backend: str
    block_chars: int
    hashes: tuple[int, ...]
    weight: int
    at_ms: float


@dataclass(frozen=True, slots=True)
class Forget:
    """`backend` went down: its cache may be gone."""

    gateway: str
    backend: str
    at_ms: float


@dataclass(frozen=True, slots=True)
class TtftPoints:
    """TTFTs a gateway observed: (backend, work tokens, seconds) each."""

    gateway: str
    points: tuple[tuple[str, float, float], ...]
    at_ms: float


Event = Placement | Withdrawal | Eviction | Forget | TtftPoints


@dataclass(slots=True)
class EventCounters:
    """Totals since start, for `/admin/backends` and the metrics."""

    queued: int = 0  # local events noted
    published: int = 0  # of those, sent to the other gateways (or the stream)
    dropped: int = 0  # of those, lost to a full queue
    received: int = 0  # events read from other gateways
    applied: int = 0  # of those, applied to the local mirror
    skipped: int = 0  # of those, unusable here (unknown backend, other block size, bad entry)
    lag_ms_last: float | None = None  # made elsewhere → applied here, the last event
