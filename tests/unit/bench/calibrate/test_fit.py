from __future__ import annotations

import dataclasses

import pytest

from bench.calibrate.fit import (
    ENGINE_ITL,
    ENGINE_TTFT,
    ITL,
    TTFT,
    Coefficients,
    fit,
    prefill_steps,
    replay_observations,
    solve,
)
from bench.calibrate.grid import Cell
from bench.calibrate.records import CellRecord, Repetition, RequestRecord, ServerTimes
from bench.calibrate.replay import replay_burst
from sim.engine.types import EngineConfig, StepTimeCoefficients

VOCAB = 4096
CONFIG = EngineConfig(
    block_size=32, num_blocks=2048, max_num_seqs=16, max_num_batched_tokens=1024, max_model_len=4096
)
TRUTH = Coefficients(
    timing=StepTimeCoefficients(
        overhead_s=5e-3,
        prefill_token_s=1.5e-4,
        attention_s=4e-8,
        decode_seq_s=2e-4,
        kv_read_token_s=1e-7,
        context_attention_s=6e-8,
    ),
    request_overhead_s=0.02,
    frontend_s=0.008,
    burst_request_s=0.003,
    burst_token_s=2e-6,
)
CELLS = [Cell(p, h, c, 8) for p in (64, 512, 1536) for h in (0.0, 0.5) for c in (1, 3)]


def synthetic(cell: Cell, arrivals: list[float], with_server: bool = True) -> Repetition:
    """What the client and vLLM's histograms would see if the engine model were the truth."""
    replay = replay_burst(
        cell, arrivals, CONFIG, TRUTH.timing, vocab_size=VOCAB, frontend_s=TRUTH.frontend_s
    )
    requests = []
    itl_sum = engine_ttft_sum = 0.0
    burst = TRUTH.burst_overhead_s(cell.concurrency, cell.concurrency * cell.prompt_len)
    for i, r in enumerate(replay.requests):
        ttft = replay.ttft_s(r) + TRUTH.request_overhead_s + burst
        itl = replay.mean_itl_s(r)
        assert itl is not None
        chunks = ((ttft, 1), (ttft + itl * (cell.output_len - 1), cell.output_len))
        requests.append(RequestRecord(i, cell.prompt_len, 0, cell.output_len, r.sent_s, chunks))
        itl_sum += itl * (cell.output_len - 1)
        engine_ttft_sum += replay.engine_ttft_s(r)
    server = ServerTimes(
        requests=cell.concurrency,
        inter_token_sum_s=itl_sum,
        inter_token_count=cell.concurrency * (cell.output_len - 1),
        queue_sum_s=0.0,
        prefill_sum_s=engine_ttft_sum,
        ttft_sum_s=0.0,
    )
    return Repetition(requests=tuple(requests), server=server if with_server else None)


def records(with_server: bool = True) -> list[CellRecord]:
    out = []
    for cell in CELLS:
        reps = (
            synthetic(cell, [0.0005 * i for i in range(cell.concurrency)], with_server),
            synthetic(cell, [0.003 * i for i in range(cell.concurrency)], with_server),
        )
        out.append(CellRecord(cell, reps))
    return out


@pytest.mark.parametrize("with_server", [True, False])
def test_fit_recovers_known_coefficients(with_server: bool) -> None:
    coef, obs = fit(records(with_server), CONFIG, VOCAB, frontend_candidates=(0.0, 0.008, 0.016))
    assert coef.vector() == pytest.approx(TRUTH.vector(), rel=1e-3)
    assert coef.frontend_s == TRUTH.frontend_s
    kinds = {o.kind for o in obs}
    assert kinds == ({TTFT, ENGINE_TTFT, ENGINE_ITL} if with_server else {TTFT, ITL})


def test_observations_reproduce_the_measurements_under_the_truth() -> None:
    for o in replay_observations(records(), CONFIG, TRUTH, VOCAB):
        assert o.predict(TRUTH) == pytest.approx(o.measured_s, rel=1e-9)


def test_solve_drops_an_outlier() -> None:
    obs = replay_observations(records(), CONFIG, TRUTH, VOCAB)
    stalled = dataclasses.replace(obs[3], measured_s=obs[3].measured_s * 4)
    coef = solve([*obs[:3], stalled, *obs[4:]])
    assert coef.vector() == pytest.approx(TRUTH.vector(), rel=1e-6)


def test_prefill_steps_chunks_by_the_budget() -> None:
    steps, f = prefill_steps(prompt_len=2500, cached=500, chunk_budget=1024)
    assert steps == 2
    assert f.prefill_tokens == 2000
    assert f.attention_pairs == 1024 * 1524 + 976 * 2500
    assert f.context_pairs == 1024 * 500 + 976 * 1524
    assert prefill_steps(100, 100, 1024)[0] == 1


def test_rows_of_a_burst_share_one_unit_of_weight() -> None:
    obs = replay_observations(records(), CONFIG, TRUTH, VOCAB)
    for o in obs:
        if o.kind == TTFT:
            c = next(cell.concurrency for cell in CELLS if cell.key == o.cell_key)
            assert o.weight == pytest.approx(1 / c)
        else:
            assert o.weight == 1.0


def test_burst_terms_are_zero_for_a_request_alone() -> None:
    assert TRUTH.burst_overhead_s(1, 4096) == 0.0
    # three requests of 512 tokens: two others, 1,024 prompt tokens of theirs
    assert TRUTH.burst_overhead_s(3, 1536) == pytest.approx(2 * 0.003 + 1024 * 2e-6)


def test_without_burst_terms_the_fit_leaves_them_at_zero() -> None:
    coef, obs = fit(records(), CONFIG, VOCAB, frontend_candidates=(0.008,), burst_terms=False)
    assert coef.burst_request_s == 0.0
    assert coef.burst_token_s == 0.0
    assert all(o.row[-2:] == (0.0, 0.0) for o in obs)
