from __future__ import annotations

import pytest

from bench.calibrate.grid import Cell
from bench.calibrate.replay import replay_burst, shared_done
from sim.engine.types import EngineConfig, StepTimeCoefficients

CONFIG = EngineConfig(
    block_size=32, num_blocks=512, max_num_seqs=8, max_num_batched_tokens=2048, max_model_len=4096
)
TIMING = StepTimeCoefficients(
    overhead_s=0.01, prefill_token_s=1e-4, attention_s=0.0, decode_seq_s=1e-3, kv_read_token_s=0.0
)


def test_single_request_one_prefill_step_then_decode_steps() -> None:
    replay = replay_burst(Cell(640, 0.0, 1, 4), [0.0], CONFIG, TIMING, vocab_size=1000)
    (r,) = replay.requests
    assert replay.ttft_s(r) == pytest.approx(0.01 + 640 * 1e-4)
    assert replay.mean_itl_s(r) == pytest.approx(0.011)
    assert replay.engine_ttft_s(r) == pytest.approx(replay.ttft_s(r))


def test_shared_prefix_is_cached_by_the_warm_up() -> None:
    replay = replay_burst(Cell(640, 0.5, 1, 2), [0.0], CONFIG, TIMING, vocab_size=1000)
    assert replay.steps[0].features.prefill_tokens == 640 - 320


def test_a_late_arrival_waits_for_the_running_step() -> None:
    replay = replay_burst(Cell(640, 0.0, 2, 2), [0.0, 0.001], CONFIG, TIMING, vocab_size=1000)
    first, second = replay.requests
    assert first.first_step == 0
    assert replay.queued_step(second) == 1
    # The second request's engine-side TTFT starts at the step boundary, not at its arrival.
    assert replay.ttft_s(second) - replay.engine_ttft_s(second) == pytest.approx(
        replay.steps[1].start_s - 0.001
    )


def test_requests_arriving_together_share_a_step() -> None:
    replay = replay_burst(Cell(64, 0.0, 4, 2), [0.0] * 4, CONFIG, TIMING, vocab_size=1000)
    assert {r.first_step for r in replay.requests} == {0}
    assert replay.steps[0].features.prefill_tokens == 256


def test_the_frontend_spaces_out_a_burst() -> None:
    replay = replay_burst(
        Cell(64, 0.0, 3, 2), [0.0, 0.0, 0.0], CONFIG, TIMING, vocab_size=1000, frontend_s=0.005
    )
    assert [r.arrival_s for r in sorted(replay.requests, key=lambda r: r.arrival_s)] == (
        pytest.approx([0.005, 0.010, 0.015])
    )
    first = min(replay.requests, key=lambda r: r.arrival_s)
    # The client-side TTFT includes the frontend; the engine-side one does not.
    assert replay.ttft_s(first) == pytest.approx(0.005 + replay.engine_ttft_s(first))


def test_shared_work_is_interleaved_among_the_requests_in_it() -> None:
    assert shared_done([0.0, 0.0, 0.0], 0.004) == pytest.approx([0.012] * 3)
    assert shared_done([0.0, 0.010], 0.004) == pytest.approx([0.004, 0.014])
    # Alone for 2 ms, then two share the server: 2 ms of work left each takes 4 ms.
    assert shared_done([0.0, 0.002], 0.004) == pytest.approx([0.006, 0.008])
    assert shared_done([0.0, 0.001], 0.0) == [0.0, 0.001]


def test_a_burst_reaches_the_engine_after_the_shared_then_the_serial_work() -> None:
    replay = replay_burst(
        Cell(64, 0.0, 2, 2),
        [0.0, 0.0],
        CONFIG,
        TIMING,
        vocab_size=1000,
        frontend_s=0.005,
        shared_s=0.003,
    )
    arrivals = sorted(r.arrival_s for r in replay.requests)
    assert arrivals == pytest.approx([0.006 + 0.005, 0.006 + 0.010])
