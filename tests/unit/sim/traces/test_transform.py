from __future__ import annotations

import pytest

from routing.traces import TraceRequest
from sim.traces import merged, slice_count, slice_time, time_scaled


def _trace(*arrivals: float) -> list[TraceRequest]:
    return [TraceRequest(t, 10 + i, 1, (i,)) for i, t in enumerate(arrivals)]


TRACE = _trace(2.0, 3.0, 5.0, 9.0)


def test_time_scaled_starts_at_zero() -> None:
    out = time_scaled(TRACE, 2.0)
    assert [r.arrival_s for r in out] == [0.0, 0.5, 1.5, 3.5]
    assert [r.input_tokens for r in out] == [10, 11, 12, 13]
    assert TRACE[0].arrival_s == 2.0  # input untouched
    assert time_scaled([], 3.0) == []
    with pytest.raises(ValueError, match="> 0"):
        time_scaled(TRACE, 0)


def test_slice_time_counts_from_the_window_start() -> None:
    out = slice_time(TRACE, 3.0, 9.0)
    assert [(r.arrival_s, r.input_tokens) for r in out] == [(0.0, 11), (2.0, 12)]
    assert len(slice_time(TRACE, 0.0)) == 4
    assert slice_time(TRACE, 10.0, 20.0) == []
    with pytest.raises(ValueError, match="before it starts"):
        slice_time(TRACE, 5.0, 1.0)


def test_slice_count_counts_from_its_first_request() -> None:
    out = slice_count(TRACE, 2, start=1)
    assert [(r.arrival_s, r.input_tokens) for r in out] == [(0.0, 11), (2.0, 12)]
    assert len(slice_count(TRACE, 10)) == 4
    assert slice_count(TRACE, 0) == []
    assert slice_count(TRACE, 3, start=9) == []
    with pytest.raises(ValueError):
        slice_count(TRACE, -1)


def test_merged_keeps_the_traces_ids_apart() -> None:
    a = [TraceRequest(0.0, 5, 1, (0, 1)), TraceRequest(2.0, 5, 1, (0, 2))]
    b = [TraceRequest(1.0, 5, 1, (0, 1))]
    out = merged(a, b)
    assert [r.arrival_s for r in out] == [0.0, 1.0, 2.0]
    assert [r.hash_ids for r in out] == [(0, 1), (2, 3), (0, 4)]
