"""The TTFT floor: a lower bound on each request's TTFT that no router can beat.

For a request r arriving at a_r, any router's TTFT is at least

    floor_r = min over j of [ max(0, ready_j − a_r) + alone(j blocks cached, r's prompt) ]

where `alone(c, n)` is the time an idle engine takes from a request's arrival to its first
token when the first c tokens of its n-token prompt are cached (chunked as the engine
chunks, `max_num_batched_tokens` a step, with the engine model's step times), and
`ready_j` is the earliest instant at which r's first j prompt blocks could all be cached
anywhere. A block exists only once a request holding it has computed the prompt up to
it, in order: a request q arriving at a_q whose first i blocks are ready at R_i can have
its block k (k ≥ i) at the earliest

    min over i ≤ k of [ max(a_q, R_i) + overhead_s + prefill_token_s × (k+1−i)·B
                        + attention_s × (F((k+1)·B) − F(i·B)) ],   F(x) = x(x+1)/2,

one step's overhead plus the prefill and attention of the tokens from block i to the end
of block k (each token attends to at least every token up to itself; B tokens a block;
a profile's `context_attention_s`, which prices pairs with context cached before a chunk, and
`prefill_seq_s`, a prefilling sequence's own cost, are left out here: non-negative terms,
so the bound stays a bound).
Every term separates into a part of i and a part of k, so a running minimum over i gives
every block's instant in one pass. A burst of requests for one new prefix thus waits for
the prefix's computation, as any fleet must, instead of finding it cached a step after
the first arrival. The bound is per request, so it holds for every order statistic too:
no router's mean or p90 TTFT is below the floors' mean or p90. It ignores what a real
fleet cannot avoid — queueing behind other requests, finite caches and their evictions,
decode steps sharing the engine — so real routers sit above it; how far above says how
much room routing still has.

Arrivals are the run's own: fixed for an open loop, and in a closed loop the instants the
router's own run sent each request (a faster router sends sooner).
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
