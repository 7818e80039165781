"""The P/D benchmark's workloads and its capacity arithmetic; pure and seeded.

- `tenant_chats` (comparison A): `TENANTS` tenants, each with a `PREFIX_TOKENS`-token system
  prompt, chats of 2–6 turns (`sim.workloads.family`), sent open loop by `chat_requests`:
  chats start as a Poisson process, turns `think_s` apart on average, from a warm-up before
  the window so that requests arrive at the steady rate from its start (the turns before the
  window and after its end are left out: chats already under way, or not over, at the edges).
- `mixed_trace` (comparison B): single requests with prompts of their own, `SHORT_SHARE` of
  them short (`SHORT_TOKENS` ± 50 %), the rest long (`LONG_TOKENS`, uniform), Poisson
  arrivals; sent live as token-id completions, replayed as the same trace by the simulator.
- Capacity: `steady_rate` reads a saturation probe's completions over time (the middle half
  of them, so the ramp-up and the closed loop's tail are left out); `prefill_capacity_rps`
  is the rate at which `engines` engines of a profile prefill a trace's prompts from scratch,
  one at a time: engines / mean(`prefill_s`), `prefill_s` summing the step times of a prompt's
  chunks of `max_num_batched_tokens` (overhead + tokens · prefill_token_s + attention).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import replace
from itertools import count

from routing.traces import TraceRequest
from sim.engine.types import EngineProfile, StepFeatures
from sim.workloads import TimedRequest, family

MODEL = "kvgate-pd"
TENANTS = 8
PREFIX_TOKENS = 1500
MIN_TURNS, MAX_TURNS = 2, 6
USER_TOKENS = 80
OUTPUT_TOKENS = 32
SHORT_SHARE = 0.7
SHORT_TOKENS = 100
LONG_TOKENS = (3000, 4000)
BLOCK_TOKENS = 16  # the demo profile's block size: trace blocks line up with the engine's


def tenant_chats(seed: int, conversations: int) -> list[family.Chat]:
    """Comparison A's chats: uniform over the tenants, 2–6 turns each."""
    cell = family.FamilyCell(
        tenants=TENANTS,
        prefix_tokens=PREFIX_TOKENS,
        popularity="uniform",
        conversations=conversations,
        min_turns=MIN_TURNS,
        max_turns=MAX_TURNS,
        user_tokens=USER_TOKENS,
        output_tokens=OUTPUT_TOKENS,
        seed=seed,
    )
    return family.chats(cell)


def warmup_s(think_s: float) -> float:
    """How long before the window chats start: a long chat's turns (`MAX_TURNS` − 1 gaps)."""
    return (MAX_TURNS - 1) * think_s


def conversations_for(rate_rps: float, duration_s: float, think_s: float = 0.0) -> int:
    """How many chats make requests at `rate_rps` over `duration_s` and the warm-up before it
    (`warmup_s(think_s)`), at the mean number of turns."""
    span = duration_s + warmup_s(think_s)
    return max(1, round(rate_rps * span / ((MIN_TURNS + MAX_TURNS) / 2)))


def chat_requests(
    chats: Sequence[family.Chat], rate_rps: float, think_s: float, seed: int, duration_s: float
) -> list[TimedRequest]:
    """The chats' turns that arrive within a window of `duration_s`, open loop at `rate_rps`
    requests a second, as streamed chat completions (see the module docstring)."""
    arrivals = family.open_arrivals(chats, rate_rps, think_s, seed)
    start = warmup_s(think_s)
    return [
        replace(r, at_s=r.at_s - start)
        for r in family.chat_requests(chats, arrivals, MODEL)
        if start <= r.at_s < start + duration_s
    ]


def mixed_trace(seed: int, requests: int, rate_rps: float) -> list[TraceRequest]:
    """Comparison B's requests: short and long prompts, none sharing a block with another."""
    rng = random.Random(seed)
    ids = count()
    out = []
    t = 0.0
    for _ in range(requests):
        if rng.random() < SHORT_SHARE:
            tokens = rng.randint(SHORT_TOKENS // 2, SHORT_TOKENS * 3 // 2)
        else:
            tokens = rng.randint(*LONG_TOKENS)
        blocks = -(-tokens // BLOCK_TOKENS)
        out.append(
            TraceRequest(
                arrival_s=t,
                input_tokens=tokens,
                output_tokens=OUTPUT_TOKENS,
                hash_ids=tuple(next(ids) for _ in range(blocks)),
                block_tokens=BLOCK_TOKENS,
            )
        )
        t += rng.expovariate(rate_rps)
    return out


def is_long(r: TraceRequest) -> bool:
    return r.input_tokens >= LONG_TOKENS[0]


def prefill_s(profile: EngineProfile, tokens: int) -> float:
    """Seconds an idle engine of `profile` takes to prefill a fresh `tokens`-token prompt."""
    budget = profile.config.max_num_batched_tokens
    total, done = 0.0, 0
    while done < tokens:
        chunk = min(budget, tokens - done)
        done += chunk
        features = StepFeatures(prefill_tokens=chunk, attention_pairs=chunk * done, prefill_seqs=1)
        total += profile.timing.step_time(features)
    return total


def prefill_capacity_rps(
    profile: EngineProfile, trace: Sequence[TraceRequest], engines: int
) -> float:
    """Requests a second `engines` engines prefill, one prompt at a time (see the docstring)."""
    mean = sum(prefill_s(profile, r.input_tokens) for r in trace) / len(trace)
    return engines / mean


def steady_rate(samples: Sequence[tuple[float, int]]) -> float:
    """Completions a second between the 25th and 75th percentile of completions, from
    (seconds, completions so far) samples in time order; NaN with too few."""
    if not samples or samples[-1][1] < 4:
        return float("nan")
    total = samples[-1][1]
    lo = next(s for s in samples if s[1] >= total * 0.25)
    hi = next(s for s in samples if s[1] >= total * 0.75)
    if hi[0] <= lo[0]:
        return float("nan")
    return (hi[1] - lo[1]) / (hi[0] - lo[0])
