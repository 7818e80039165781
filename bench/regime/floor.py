"""The TTFT floor: a lower bound on each request's TTFT that no router can beat.

    floor_r = min over j of [ max(0, ready_j − a_r) + alone(j blocks cached, r's prompt) ]

for a request r arriving at a_r (the run's own arrivals). `alone(c, n)`: an idle engine's time
from arrival to first token with c of n prompt tokens cached (chunked as the engine does, at
the model's step times). `ready_j`: the earliest instant r's first j blocks could be cached
anywhere; a request q arriving at a_q with its first i blocks ready at R_i has block k ≥ i at

    min over i ≤ k of [ max(a_q, R_i) + overhead_s + prefill_token_s × (k+1−i)·B
                        + attention_s × (F((k+1)·B) − F(i·B)) ],   F(x) = x(x+1)/2

(B tokens a block; one pass with a running minimum over i; `context_attention_s` and
`prefill_seq_s` left out: non-negative). Per request, hence for every order statistic; it
ignores queueing, finite caches and decode steps (docs/decisions/0011-regime-map-steady-state.md).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from routing.traces import TraceRequest
from sim.engine.types import EngineProfile, StepFeatures, StepTimeCoefficients


def alone_ttft(profile: EngineProfile, cached: int, total: int) -> float:
    """Arrival to first token of a lone request on an idle engine with `cached` of its
    `total` prompt tokens cached (the last prompt token is always computed)."""
    timing, budget = profile.timing, profile.config.max_num_batched_tokens
    pos = min(cached, total - 1)
    t = 0.0
    while pos < total:
        chunk = min(budget, total - pos)
        before, pos = pos, pos + chunk
        features = StepFeatures(
            prefill_tokens=chunk,
            attention_pairs=chunk * pos,
            context_pairs=chunk * before,
            prefill_seqs=1,
        )
        t += timing.step_time(features)
    return t


def floors(
    trace: Sequence[TraceRequest], arrivals: Sequence[float], profile: EngineProfile
) -> list[float]:
    """Each request's TTFT floor (see the module docstring), `arrivals[i]` being when
    `trace[i]` was sent."""
    timing = profile.timing
    ready: dict[int, float] = {}  # block id → earliest instant it can be cached anywhere
    out = [math.nan] * len(trace)
    for i in sorted(range(len(trace)), key=arrivals.__getitem__):
        r, at = trace[i], arrivals[i]
        full = min(len(r.hash_ids), r.input_tokens // r.block_tokens)
        held = _leading_ready(ready, r.hash_ids[:full], at)
        best = alone_ttft(profile, 0, r.input_tokens)
        for j, t in enumerate(held, start=1):
            best = min(best, t - at + alone_ttft(profile, j * r.block_tokens, r.input_tokens))
        out[i] = best
        for h, made in zip(
            r.hash_ids[:full], _made(timing, r.block_tokens, at, held, full), strict=True
        ):
            if made < ready.get(h, math.inf):
                ready[h] = made
    return out


def _leading_ready(ready: dict[int, float], blocks: Sequence[int], at: float) -> list[float]:
    """R_1.., as instants ≥ `at`: when the first 1, 2, ... blocks are all cached, up to the
    first block no earlier request can have made."""
    out: list[float] = []
    latest = at
    for h in blocks:
        t = ready.get(h)
        if t is None:
            break
        latest = max(latest, t)
        out.append(latest)
    return out


def _made(timing: StepTimeCoefficients, block: int, at: float, held: Sequence[float],
          full: int) -> list[float]:  # fmt: skip
    """The earliest instant each of a request's `full` blocks can exist (module docstring),
    its first len(held) blocks being cached at the instants `held`."""
    p, a = timing.prefill_token_s, timing.attention_s

    def f(x: int) -> float:
        return x * (x + 1) / 2

    # The part of i, max(a_q, R_i) − p·i·B − a·F(i·B), minimised over i ≤ k as k grows.
    best = at  # i = 0: nothing cached
    out = []
    for k in range(full):
        if k < len(held) + 1 and k > 0:
            i = k  # R_i for i = k, when blocks 0..k−1 are held
            best = min(best, held[i - 1] - p * i * block - a * f(i * block))
        end = (k + 1) * block
        out.append(best + timing.overhead_s + p * end + a * f(end))
    return out
