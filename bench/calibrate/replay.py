"""Replay one measured burst through the engine model in virtual time.

The burst is rebuilt as measured — warm-up prompts first, run to completion so their blocks
are cached, then the measured prompts at the client's measured send offsets — and stepped
until every request has its last token. vLLM's API server, in front of the engine, is two
stages: `shared_s` of work a request interleaved among all requests in the server (processor
sharing: with n sent together even the first leaves after n × shared_s, `shared_done`), then
a FIFO of `frontend_s` each, so request i reaches the engine at

    arrival_i = max(sent_i, arrival_{i−1}) + frontend_s     (sent_i: when it left the first)

The result keeps every step's start and features, so the fit can write any request's TTFT or
ITL as a linear function of the coefficients (`fit.py`), and the evaluation can read predicted
times directly.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from bench.calibrate.grid import Cell
from bench.calibrate.plan import plan_burst
from sim.engine.model import EngineModel
from sim.engine.types import EngineConfig, StepFeatures, StepTimeCoefficients


@dataclass(frozen=True, slots=True)
class Step:
    start_s: float
    duration_s: float
    features: StepFeatures


@dataclass(frozen=True, slots=True)
class ReplayedRequest:
    sent_s: float  # by the client
    arrival_s: float  # at the engine, after the API server's frontend queue
    first_step: int  # index into BurstReplay.steps of the step that emits token 0
    last_step: int
    output_len: int

    def __post_init__(self) -> None:
        if self.last_step < self.first_step:
            raise ValueError("last step before first step")


@dataclass(frozen=True, slots=True)
class BurstReplay:
    steps: tuple[Step, ...]
    requests: tuple[ReplayedRequest, ...]  # in order of first token (then arrival)

    def end_s(self, step: int) -> float:
        s = self.steps[step]
        return s.start_s + s.duration_s

    def ttft_s(self, r: ReplayedRequest) -> float:
        """From the client sending it to the engine emitting the first token."""
        return self.end_s(r.first_step) - r.sent_s

    def queued_step(self, r: ReplayedRequest) -> int:
        """The first step that starts at or after the request's arrival.

        vLLM's engine core takes new requests between steps and stamps them QUEUED then, so
        its queue + prefill time runs from this step's start to the first token.
        """
        return next(i for i, s in enumerate(self.steps) if s.start_s >= r.arrival_s)

    def engine_ttft_s(self, r: ReplayedRequest) -> float:
        return self.end_s(r.first_step) - self.steps[self.queued_step(r)].start_s

    def mean_itl_s(self, r: ReplayedRequest) -> float | None:
        if r.output_len < 2:
            return None
        return (self.end_s(r.last_step) - self.end_s(r.first_step)) / (r.output_len - 1)


def replay_burst(
    cell: Cell,
    sent_s: list[float],
    config: EngineConfig,
    timing: StepTimeCoefficients,
    *,
    vocab_size: int,
    frontend_s: float = 0.0,
    shared_s: float = 0.0,
    seed: int = 0,
) -> BurstReplay:
    """Replay `cell` with request i (in send order) sent at sorted(sent_s)[i]."""
    burst = plan_burst(cell, random.Random(seed), vocab_size)
    engine = EngineModel(config, timing)
    for i, prefix in enumerate(burst.warmups):
        engine.add_request(f"warm-{i}", prefix, (0,))
    while engine.has_work():
        engine.step()
    sent = sorted(sent_s)
    if len(sent) != len(burst.prompts):
        raise ValueError(f"{cell.key}: {len(sent)} send times for {len(burst.prompts)} prompts")
    arrivals: list[float] = []
    for t in shared_done(sent, shared_s):
        arrivals.append(max(t, arrivals[-1] if arrivals else t) + frontend_s)
    pending = list(enumerate(zip(arrivals, burst.prompts, strict=True)))
    output = tuple(range(3, 3 + cell.output_len))
    now = arrivals[0] if arrivals else 0.0
    steps: list[Step] = []
    first: dict[int, int] = {}
    last: dict[int, int] = {}
    while pending or engine.has_work():
        while pending and pending[0][1][0] <= now:
            i, (_, prompt) = pending.pop(0)
            engine.add_request(str(i), prompt, output)
        if not engine.has_work():
            now = pending[0][1][0]
            continue
        result = engine.step()
        steps.append(Step(now, result.duration_s, result.features))
        now += result.duration_s
        for event in result.tokens:
            i = int(event.request_id)
            first.setdefault(i, len(steps) - 1)
            last[i] = len(steps) - 1
    replayed = [
        ReplayedRequest(sent[i], arrivals[i], first[i], last[i], cell.output_len)
        for i in range(len(arrivals))
    ]
    replayed.sort(key=lambda r: (r.first_step, r.arrival_s))
    return BurstReplay(steps=tuple(steps), requests=tuple(replayed))


def shared_done(sent: list[float], work_s: float) -> list[float]:
    """When each request (sorted by send time) finishes `work_s` of work shared equally among
    all requests in the stage (processor sharing: an event loop interleaving them)."""
    if work_s <= 0:
        return list(sent)
    n = len(sent)
    done = [0.0] * n
    left: dict[int, float] = {}
    now = sent[0] if sent else 0.0
    nxt = 0
    while nxt < n or left:
        arrive = sent[nxt] if nxt < n else math.inf
        if left:
            k = len(left)
            finish = now + min(left.values()) * k
            until = min(finish, arrive)
            for i in left:
                left[i] -= (until - now) / k
            now = until
            for i in [i for i, w in left.items() if w <= 1e-12]:
                done[i] = now
                del left[i]
        else:
            now = arrive
        while nxt < n and sent[nxt] <= now:
            left[nxt] = work_s
            nxt += 1
    return done
