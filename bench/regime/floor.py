"""The TTFT floor: a lower bound on each request's TTFT that no router can beat.

For a request r arriving at a_r, any router's TTFT is at least

    floor_r = min over j of [ max(0, ready_j − a_r) + alone(j blocks cached, r's prompt) ]

where `alone(c, n)` is the time an idle engine takes from a request's arrival to its first
token when the first c tokens of its n-token prompt are cached (chunked as the engine
chunks, `max_num_batched_tokens` a step, with the engine model's step times), and
`ready_j` is the earliest instant at which r's first j prompt blocks could all be cached
anywhere: a block exists only once a request holding it has been computed up to it,
which takes at least one step (`overhead_s` plus the block's own prefill) after that
request's arrival. The bound is per request, so it holds for every order statistic too:
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

from sim.engine.types import EngineProfile, StepFeatures
from sim.traces import TraceRequest


def alone_ttft(profile: EngineProfile, cached: int, total: int) -> float:
    """Arrival to first token of a lone request on an idle engine with `cached` of its
    `total` prompt tokens cached (the last prompt token is always computed)."""
    timing, budget = profile.timing, profile.config.max_num_batched_tokens
    pos = min(cached, total - 1)
    t = 0.0
    while pos < total:
        chunk = min(budget, total - pos)
        pos += chunk
        t += timing.step_time(StepFeatures(prefill_tokens=chunk, attention_pairs=chunk * pos))
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
        best = alone_ttft(profile, 0, r.input_tokens)
        wait = 0.0
        for j in range(full):
            t = ready.get(r.hash_ids[j])
            if t is None:
                break
            wait = max(wait, t - at)
            best = min(best, wait + alone_ttft(profile, (j + 1) * r.block_tokens, r.input_tokens))
        out[i] = best
        made = at + timing.overhead_s + timing.prefill_token_s * r.block_tokens
        for h in r.hash_ids[:full]:
            if made < ready.get(h, math.inf):
                ready[h] = made
    return out
