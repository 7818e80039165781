from __future__ import annotations

import json

import pytest

from bench.calibrate.grid import Cell
from bench.calibrate.records import (
    CellRecord,
    Repetition,
    RequestRecord,
    ServerTimes,
    cell_from_json,
    cell_to_json,
)


def request(chunks: tuple[tuple[float, int], ...]) -> RequestRecord:
    return RequestRecord(0, 64, 32, chunks[-1][1], 0.001, chunks)


def test_itl_counts_tokens_not_chunks() -> None:
    # Tokens 2 and 3 arrive in one chunk: the mean is over tokens.
    r = request(((0.05, 1), (0.06, 2), (0.08, 4)))
    assert r.ttft_s == 0.05
    assert r.mean_itl_s == pytest.approx(0.01)
    assert r.median_gap_s == pytest.approx(0.01)


def test_single_token_has_no_itl() -> None:
    r = request(((0.05, 1),))
    assert r.mean_itl_s is None
    assert r.median_gap_s is None


def test_server_times_are_differences() -> None:
    before = {
        "request_prefill_time_seconds_count": 10.0,
        "inter_token_latency_seconds_sum": 1.0,
        "inter_token_latency_seconds_count": 100.0,
        "request_queue_time_seconds_sum": 0.5,
        "request_prefill_time_seconds_sum": 2.0,
    }
    after = {
        "request_prefill_time_seconds_count": 12.0,
        "inter_token_latency_seconds_sum": 1.3,
        "inter_token_latency_seconds_count": 130.0,
        "request_queue_time_seconds_sum": 0.6,
        "request_prefill_time_seconds_sum": 2.3,
    }
    t = ServerTimes.between(before, after)
    assert t.requests == 2
    assert t.mean_itl_s == pytest.approx(0.01)
    assert t.mean_engine_ttft_s == pytest.approx(0.2)


def test_json_round_trip() -> None:
    server = ServerTimes(1, 0.1, 10, 0.0, 0.2, 0.25)
    rec = CellRecord(
        Cell(64, 0.5, 1, 2),
        (Repetition((request(((0.05, 1), (0.06, 2))),), (32,), server),),
    )
    assert cell_from_json(json.loads(json.dumps(cell_to_json(rec)))) == rec


def repetition(*streams: tuple[tuple[float, int], ...], itl_s: float = 0.002) -> Repetition:
    server = ServerTimes(len(streams), itl_s * 31 * len(streams), 31 * len(streams), 0, 0, 0)
    return Repetition(requests=tuple(request(c) for c in streams), server=server)


def test_a_stream_that_arrives_in_one_piece_stalls_its_repetition() -> None:
    flowing = ((0.010, 1), (0.012, 2), (0.072, 32))  # 31 gaps in 62 ms: vLLM's pace
    lumped = ((0.190, 1), (0.1905, 2), (0.191, 32))  # all 32 tokens within 1 ms
    assert not repetition(flowing, flowing).stalled
    assert repetition(flowing, lumped).stalled
    # Without vLLM's own inter-token latency there is nothing to judge by.
    assert not Repetition(requests=(request(lumped),)).stalled


def test_without_stalls_keeps_the_other_repetitions() -> None:
    flowing = ((0.010, 1), (0.072, 32))
    lumped = ((0.190, 1), (0.191, 32))
    cell = Cell(64, 0.5, 1, 32)
    rec = CellRecord(cell, (repetition(flowing), repetition(lumped), repetition(flowing)))
    assert rec.without_stalls().repetitions == (repetition(flowing), repetition(flowing))
