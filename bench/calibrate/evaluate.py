"""Predict each measured cell with the fitted coefficients and line the two up."""

from __future__ import annotations

import statistics

from bench.calibrate.compare import CellComparison
from bench.calibrate.fit import Coefficients, by_first_token
from bench.calibrate.records import CellRecord
from bench.calibrate.replay import replay_burst
from sim.engine.types import EngineConfig


def compare_cell(
    rec: CellRecord, config: EngineConfig, coef: Coefficients, vocab_size: int, held_back: bool
) -> CellComparison:
    """Per repetition, replay the burst and pair requests by first-token order; then take,
    for each rank, the median over repetitions of measured and of predicted values."""
    m_ttft: list[list[float]] = []
    p_ttft: list[list[float]] = []
    m_itl: list[list[float]] = []
    p_itl: list[list[float]] = []
    engine: dict[str, list[float]] = {"m_ttft": [], "p_ttft": [], "m_itl": [], "p_itl": []}
    for rep in rec.repetitions:
        replay = replay_burst(
            rec.cell,
            [r.sent_s for r in rep.requests],
            config,
            coef.timing,
            vocab_size=vocab_size,
            frontend_s=coef.frontend_s,
            shared_s=coef.shared_s,
        )
        measured = by_first_token(rep.requests)
        m_ttft.append([r.ttft_s for r in measured])
        n = len(replay.requests)
        overhead = coef.request_overhead_s + coef.burst_overhead_s(n, n * rec.cell.prompt_len)
        p_ttft.append([replay.ttft_s(r) + overhead for r in replay.requests])
        itl_pairs = [
            (m, p)
            for r, q in zip(measured, replay.requests, strict=True)
            if (m := r.mean_itl_s) is not None and (p := replay.mean_itl_s(q)) is not None
        ]
        m_itl.append([m for m, _ in itl_pairs])
        p_itl.append([p for _, p in itl_pairs])
        if rep.server is not None:
            if (v := rep.server.mean_engine_ttft_s) is not None:
                engine["m_ttft"].append(v)
                engine["p_ttft"].append(_mean([replay.engine_ttft_s(r) for r in replay.requests]))
            itls = [v for r in replay.requests if (v := replay.mean_itl_s(r)) is not None]
            if (v := rep.server.mean_itl_s) is not None and itls:
                engine["m_itl"].append(v)
                engine["p_itl"].append(_mean(itls))
    return CellComparison(
        cell=rec.cell,
        held_back=held_back,
        measured_ttft_s=_rank_medians(m_ttft),
        predicted_ttft_s=_rank_medians(p_ttft),
        measured_itl_s=_rank_medians(m_itl),
        predicted_itl_s=_rank_medians(p_itl),
        measured_engine_ttft_s=_median(engine["m_ttft"]),
        predicted_engine_ttft_s=_median(engine["p_ttft"]),
        measured_engine_itl_s=_median(engine["m_itl"]),
        predicted_engine_itl_s=_median(engine["p_itl"]),
    )


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


def _median(values: list[float]) -> tuple[float, ...]:
    return (statistics.median(values),) if values else ()


def _rank_medians(values: list[list[float]]) -> tuple[float, ...]:
    values = [v for v in values if v]
    if not values:
        return ()
    n = min(len(v) for v in values)
    return tuple(statistics.median(col) for col in zip(*(v[:n] for v in values), strict=True))
