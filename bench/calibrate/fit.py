"""Fit the engine model's step-time coefficients to measured TTFTs and inter-token latencies.

Unknowns: the seven `StepTimeCoefficients`, `request_overhead_s` (client TTFT beyond the
engine's steps), `burst_request_s` and `burst_token_s` (per other request of the burst and per
prompt token of theirs), `frontend_s` (held at 0, see FRONTEND_CANDIDATES_S) and `shared_s`
(`replay.py`); the profile's `frontend` gets request_overhead_s (+ shared_s) and frontend_s.
Replaying each repetition of a training cell (`replay.py`) says which steps ran before a
request's first token and between its first and last, so every row is linear:

    measured ≈ Σ_{those steps} step_time(features) (+ request_overhead_s) + offset

Rows: each request's client TTFT; vLLM's own mean queue + prefill time and mean ITL over the
burst (else per-request client ITLs). Replays and non-negative least squares on relative
errors alternate until the coefficients settle (docs/decisions/0024-calibration-burst-terms.md).
"""

from __future__ import annotations

import dataclasses
import logging
import math
import statistics
from dataclasses import dataclass

from bench.calibrate.nnls import nnls
from bench.calibrate.records import CellRecord, RequestRecord
from bench.calibrate.replay import BurstReplay, ReplayedRequest, replay_burst
from sim.engine.types import EngineConfig, StepFeatures, StepTimeCoefficients

log = logging.getLogger(__name__)

TTFT = "ttft"  # client side, per request
ITL = "itl"  # client side, per request
ENGINE_TTFT = "engine-ttft"  # vLLM's queue + prefill time, mean over a burst
ENGINE_ITL = "engine-itl"  # vLLM's inter-token latency, mean over a burst
NUM_UNKNOWNS = 10


@dataclass(frozen=True, slots=True)
class Coefficients:
    timing: StepTimeCoefficients
    request_overhead_s: float
    frontend_s: float = 0.0  # the API server's serial work per request (replay.py); not in NNLS
    shared_s: float = 0.0  # its interleaved work per request (replay.py); not in NNLS
    # What client TTFT pays for the other requests of its burst, beyond the engine's steps
    # (the API server's work on them before and after the engine): per other request and per
    # prompt token of the other requests. Zero for a request alone.
    burst_request_s: float = 0.0
    burst_token_s: float = 0.0

    def burst_overhead_s(self, burst: int, prompt_tokens: int) -> float:
        """What a request of a burst of `burst` requests of `prompt_tokens` in all pays beyond
        request_overhead_s; prompt_tokens counts the request's own (see `burst_columns`)."""
        others, other_tokens = burst_columns(burst, prompt_tokens)
        return self.burst_request_s * others + self.burst_token_s * other_tokens

    def vector(self) -> tuple[float, ...]:
        t = self.timing
        return (
            t.overhead_s,
            t.prefill_token_s,
            t.attention_s,
            t.decode_seq_s,
            t.kv_read_token_s,
            t.context_attention_s,
            t.prefill_seq_s,
            self.request_overhead_s,
            self.burst_request_s,
            self.burst_token_s,
        )

    @classmethod
    def of(cls, x: list[float], frontend_s: float = 0.0, shared_s: float = 0.0) -> Coefficients:
        timing = StepTimeCoefficients(
            overhead_s=x[0],
            prefill_token_s=x[1],
            attention_s=x[2],
            decode_seq_s=x[3],
            kv_read_token_s=x[4],
            context_attention_s=x[5],
            prefill_seq_s=x[6],
        )
        return cls(
            timing=timing,
            request_overhead_s=x[7],
            frontend_s=frontend_s,
            shared_s=shared_s,
            burst_request_s=x[8],
            burst_token_s=x[9],
        )


@dataclass(frozen=True, slots=True)
class Observation:
    """measured_s ≈ offset_s + row · coefficients."""

    kind: str  # TTFT or ITL
    cell_key: str
    row: tuple[float, ...]
    offset_s: float
    measured_s: float
    weight: float = 1.0  # per-request rows of a burst of c share one unit: 1/c each

    def predict(self, coef: Coefficients) -> float:
        return self.offset_s + sum(a * b for a, b in zip(self.row, coef.vector(), strict=True))


def burst_columns(burst: int, prompt_tokens: int) -> tuple[float, float]:
    """(other requests, their prompt tokens) for a request of a burst of `burst` requests with
    `prompt_tokens` prompt tokens in all, every request of it the same length."""
    others = burst - 1
    return float(others), float(prompt_tokens * others / burst) if burst else 0.0


def step_row(
    steps: int,
    f: StepFeatures,
    request_overhead: float = 0.0,
    burst: tuple[float, float] = (0.0, 0.0),
) -> tuple[float, ...]:
    return (
        float(steps),
        float(f.prefill_tokens),
        float(f.attention_pairs),
        float(f.decode_seqs),
        float(f.kv_tokens_read),
        float(f.context_pairs),
        float(f.prefill_seqs),
        request_overhead,
        *burst,
    )


def prefill_steps(prompt_len: int, cached: int, chunk_budget: int) -> tuple[int, StepFeatures]:
    """Steps and summed features of prefilling prompt_len − cached tokens alone."""
    steps = pairs = context = 0
    done = cached
    while done < prompt_len:
        chunk = min(chunk_budget, prompt_len - done)
        context += chunk * done
        done += chunk
        pairs += chunk * done
        steps += 1
    features = StepFeatures(
        prefill_tokens=prompt_len - cached,
        attention_pairs=pairs,
        context_pairs=context,
        prefill_seqs=max(steps, 1),
    )
    return max(steps, 1), features


def closed_form_observations(records: list[CellRecord], chunk_budget: int) -> list[Observation]:
    """First-guess rows from concurrency-1 cells: one request alone, no replay needed."""
    out: list[Observation] = []
    for rec in records:
        reqs = rec.requests()
        if rec.cell.concurrency != 1 or not reqs:
            continue
        cell = rec.cell
        cached = round(statistics.median(r.cached_tokens for r in reqs))
        steps, feats = prefill_steps(cell.prompt_len, cached, chunk_budget)
        ttft = statistics.median(r.ttft_s for r in reqs)
        out.append(Observation(TTFT, cell.key, step_row(steps, feats, 1.0), 0.0, ttft))
        itls = [v for r in reqs if (v := r.mean_itl_s) is not None]
        if itls:
            context = cell.prompt_len + cell.output_len // 2
            decode = StepFeatures(decode_seqs=1, kv_tokens_read=context)
            out.append(
                Observation(ITL, cell.key, step_row(1, decode), 0.0, statistics.median(itls))
            )
    return out


def by_first_token(requests: tuple[RequestRecord, ...]) -> list[RequestRecord]:
    """Requests in the order their first token came (to 0.1 ms), then in the order sent."""
    return sorted(requests, key=lambda r: (round((r.sent_s + r.ttft_s) * 1e4), r.sent_s))


def replay_observations(
    records: list[CellRecord],
    config: EngineConfig,
    coef: Coefficients,
    vocab_size: int,
    burst_terms: bool = True,
) -> list[Observation]:
    """Rows for every repetition of `records`, from a replay with `coef` (see module doc)."""
    out: list[Observation] = []
    for rec in records:
        key = rec.cell.key
        for rep in rec.repetitions:
            arrivals = [r.sent_s for r in rep.requests]
            replay = replay_burst(
                rec.cell,
                arrivals,
                config,
                coef.timing,
                vocab_size=vocab_size,
                frontend_s=coef.frontend_s,
                shared_s=coef.shared_s,
            )
            spans = [_spans(replay, r) for r in replay.requests]
            share = 1 / len(spans)
            burst = burst_columns(len(spans), len(spans) * rec.cell.prompt_len)
            for measured, sp in zip(by_first_token(rep.requests), spans, strict=True):
                row, offset = sp.ttft
                ttft_row = _with_overhead(row, burst if burst_terms else (0.0, 0.0))
                out.append(Observation(TTFT, key, ttft_row, offset, measured.ttft_s, share))
                if rep.server is None and sp.itl is not None and measured.mean_itl_s:
                    itl = Observation(ITL, key, sp.itl[0], sp.itl[1], measured.mean_itl_s, share)
                    out.append(itl)
            server = rep.server
            if server is None:
                continue
            if server.mean_engine_ttft_s:
                row, offset = _mean([sp.engine_ttft for sp in spans])
                out.append(Observation(ENGINE_TTFT, key, row, offset, server.mean_engine_ttft_s))
            itls = [sp.itl for sp in spans if sp.itl is not None]
            if server.mean_itl_s and itls:
                row, offset = _mean(itls)
                out.append(Observation(ENGINE_ITL, key, row, offset, server.mean_itl_s))
    return out


Span = tuple[tuple[float, ...], float]  # (row, offset_s)


@dataclass(frozen=True, slots=True)
class RequestSpans:
    """A replayed request's measurable intervals as (row, offset) pairs."""

    ttft: Span  # from arrival (no request_overhead_s yet)
    engine_ttft: Span  # from the step boundary where vLLM queues it
    itl: Span | None  # mean over its output tokens; None for one output token


def _spans(replay: BurstReplay, req: ReplayedRequest) -> RequestSpans:
    steps = replay.steps
    queued = replay.queued_step(req)
    ttft = (
        _sum_rows(replay, 0, req.first_step),
        steps[0].start_s + _idle(replay, 0, req.first_step) - req.sent_s,
    )
    engine_ttft = (
        _sum_rows(replay, queued, req.first_step),
        _idle(replay, queued, req.first_step),
    )
    if req.output_len < 2:
        return RequestSpans(ttft, engine_ttft, None)
    gaps = req.output_len - 1
    row = tuple(v / gaps for v in _sum_rows(replay, req.first_step + 1, req.last_step))
    itl = (row, _idle(replay, req.first_step + 1, req.last_step) / gaps)
    return RequestSpans(ttft, engine_ttft, itl)


def _idle(replay: BurstReplay, lo: int, hi: int) -> float:
    """Time the engine sat idle between the start of step lo and the start of step hi."""
    steps = replay.steps
    busy = sum(s.duration_s for s in steps[lo:hi])
    return steps[hi].start_s - steps[lo].start_s - busy


def _sum_rows(replay: BurstReplay, lo: int, hi: int) -> tuple[float, ...]:
    total = [0.0] * NUM_UNKNOWNS
    for step in replay.steps[lo : hi + 1]:
        for j, v in enumerate(step_row(1, step.features)):
            total[j] += v
    return tuple(total)


def _with_overhead(row: tuple[float, ...], burst: tuple[float, float]) -> tuple[float, ...]:
    return (*row[:-3], 1.0, *burst)


def _mean(spans: list[Span]) -> Span:
    n = len(spans)
    row = tuple(sum(col) / n for col in zip(*(r for r, _ in spans), strict=True))
    return row, sum(o for _, o in spans) / n


def solve(
    obs: list[Observation], frontend_s: float = 0.0, trim: float = 3.0, shared_s: float = 0.0
) -> Coefficients:
    """Relative least squares, robustly.

    Dividing each row by its measured value biases the fit low when measurements are noisy
    (a value measured too high is forgiven more than one measured too low), so after a first
    solve each row is divided by the geometric mean of its measured and predicted values, a
    few times over (iteratively reweighted; close to least squares on log(pred/measured)).
    Then the rows whose relative residual exceeds `trim` × the median one (at least 15 %)
    are dropped and the whole is solved again: a stalled stream or a burst of other work on
    the machine should not bend the fit.
    """
    coef = _reweighted(obs, frontend_s, shared_s)
    residuals = [abs(o.predict(coef) - o.measured_s) / o.measured_s for o in obs]
    limit = max(trim * statistics.median(residuals), 0.15) if residuals else 0.0
    kept = [o for o, r in zip(obs, residuals, strict=True) if r <= limit]
    if len(kept) < len(obs) and len(kept) >= NUM_UNKNOWNS:
        log.debug("dropped %d of %d rows as outliers", len(obs) - len(kept), len(obs))
        coef = _reweighted(kept, frontend_s, shared_s)
    return coef


def _reweighted(
    obs: list[Observation], frontend_s: float, shared_s: float, rounds: int = 4
) -> Coefficients:
    scale = [o.measured_s for o in obs]
    coef = _nnls(obs, scale, frontend_s, shared_s)
    for _ in range(rounds):
        scale = [
            math.sqrt(p * o.measured_s) if (p := o.predict(coef)) > 0 else o.measured_s for o in obs
        ]
        coef = _nnls(obs, scale, frontend_s, shared_s)
    return coef


def _nnls(
    obs: list[Observation], scale_s: list[float], frontend_s: float, shared_s: float
) -> Coefficients:
    """min Σ weight · ((row·x + offset − measured) / scale)², x ≥ 0."""
    k = [math.sqrt(o.weight) / sc for o, sc in zip(obs, scale_s, strict=True)]
    rows = [[v * ki for v in o.row] for o, ki in zip(obs, k, strict=True)]
    target = [(o.measured_s - o.offset_s) * ki for o, ki in zip(obs, k, strict=True)]
    return Coefficients.of(nnls(rows, target), frontend_s, shared_s)


# Candidates for the API server's per-request work; it shapes the schedule, so it is chosen
# by trying each (two replay-and-solve rounds apiece) rather than by least squares. The
# serial (FIFO) stage is held at 0 (decision 0024): a burst's first tokens come together, as
# when the engine takes the whole burst in at once, and a FIFO stage that lets the first
# requests of a burst into an earlier step fitted the training cells better and the held-back
# ones worse (p90 22.9% against 10.4% on the same measurements).
FRONTEND_CANDIDATES_S = (0.0,)
SHARED_CANDIDATES_S = (0.0, 0.002, 0.004, 0.006)


def fit(
    records: list[CellRecord],
    config: EngineConfig,
    vocab_size: int,
    *,
    frontend_candidates: tuple[float, ...] = FRONTEND_CANDIDATES_S,
    shared_candidates: tuple[float, ...] = SHARED_CANDIDATES_S,
    max_rounds: int = 6,
    tolerance: float = 0.01,
    burst_terms: bool = True,
) -> tuple[Coefficients, list[Observation]]:
    """Pick frontend_s by a robust score, then alternate replay and solve until no prediction
    moves by more than `tolerance`."""
    first = solve(closed_form_observations(records, config.max_num_batched_tokens))
    log.info("first guess: %s", first)
    best: tuple[float, Coefficients] | None = None
    for frontend_s in frontend_candidates:
        for shared_s in shared_candidates:
            start = dataclasses.replace(first, frontend_s=frontend_s, shared_s=shared_s)
            coef, obs = _rounds(
                records,
                config,
                vocab_size,
                start,
                max_rounds=2,
                tolerance=tolerance,
                burst_terms=burst_terms,
            )
            score = robust_score(obs, coef)
            log.info("frontend_s %.3f, shared_s %.3f: score %.5f", frontend_s, shared_s, score)
            if best is None or score < best[0]:
                best = (score, coef)
    assert best is not None
    return _rounds(
        records,
        config,
        vocab_size,
        best[1],
        max_rounds=max_rounds,
        tolerance=tolerance,
        burst_terms=burst_terms,
    )


def robust_score(obs: list[Observation], coef: Coefficients) -> float:
    """Mean squared relative residual, each capped at 50 % so stalls do not decide."""
    total = sum(
        o.weight * min(((o.predict(coef) - o.measured_s) / o.measured_s) ** 2, 0.25) for o in obs
    )
    return total / (sum(o.weight for o in obs) or 1.0)


def _rounds(
    records: list[CellRecord],
    config: EngineConfig,
    vocab_size: int,
    coef: Coefficients,
    *,
    max_rounds: int,
    tolerance: float,
    burst_terms: bool = True,
) -> tuple[Coefficients, list[Observation]]:
    obs: list[Observation] = []
    for n in range(max_rounds):
        obs = replay_observations(records, config, coef, vocab_size, burst_terms)
        new = solve(obs, coef.frontend_s, shared_s=coef.shared_s)
        moved = max(abs(o.predict(new) - o.predict(coef)) / o.measured_s for o in obs)
        log.debug("fit round %d: %s (predictions moved ≤ %.1f%%)", n + 1, new, moved * 100)
        coef = new
        if moved <= tolerance:
            break
    return coef, obs
