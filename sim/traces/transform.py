"""Reshaping a trace: replay faster or slower, cut a time window or a run of requests.

All take and return lists in arrival order and leave the input untouched.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from routing.traces.request import TraceRequest


def time_scaled(requests: Sequence[TraceRequest], factor: float) -> list[TraceRequest]:
    """Replay `factor` times faster (arrival gaps divided by `factor`), from t = 0."""
    if factor <= 0:
        raise ValueError(f"time scale factor must be > 0, got {factor}")
    if not requests:
        return []
    t0 = requests[0].arrival_s
    return [replace(r, arrival_s=(r.arrival_s - t0) / factor) for r in requests]


def slice_time(
    requests: Sequence[TraceRequest], start_s: float = 0.0, end_s: float = float("inf")
) -> list[TraceRequest]:
    """The requests arriving in [start_s, end_s), their arrivals counted from `start_s`."""
    if end_s < start_s:
        raise ValueError(f"time window ends ({end_s}) before it starts ({start_s})")
    return [
        replace(r, arrival_s=r.arrival_s - start_s)
        for r in requests
        if start_s <= r.arrival_s < end_s
    ]


def slice_count(requests: Sequence[TraceRequest], count: int, start: int = 0) -> list[TraceRequest]:
    """`count` requests from index `start`, their arrivals counted from the first of them."""
    if count < 0 or start < 0:
        raise ValueError("count and start must be >= 0")
    chosen = requests[start : start + count]
    if not chosen:
        return []
    t0 = chosen[0].arrival_s
    return [replace(r, arrival_s=r.arrival_s - t0) for r in chosen]


def merged(*traces: Sequence[TraceRequest]) -> list[TraceRequest]:
    """The traces' requests on one timeline, each trace from its own t = 0. Ids of different
    traces never match (they name different prompts); all are renumbered in order of first
    appearance."""
    tagged = sorted(
        ((r.arrival_s, n, r) for n, trace in enumerate(traces) for r in trace),
        key=lambda x: x[0],
    )
    ids: dict[tuple[int, int], int] = {}
    return [
        replace(r, hash_ids=tuple([ids.setdefault((n, h), len(ids)) for h in r.hash_ids]))
        for _, n, r in tagged
    ]
