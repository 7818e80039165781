"""The tuner's proposal: the candidate with the best predicted gain, and whether it is sure.

For candidate c and seed s, gain(c, s) = 1 − TTFT(c, s) / TTFT(live, s) (mean TTFTs; > 0: c
is faster). The predicted gain is its mean over seeds, the spread its standard deviation,
the win share the fraction of seeds with gain > 0. The best candidate has the highest mean
gain; picking the best of many noisy estimates flatters it, so `confirm` replays the live
and the best candidate again on fresh seeds (a hold-out) and the proposal's figures are the
hold-out's. It is `confident` when that gain ≥ `min_gain`, exceeds its spread, and the win
share ≥ `confidence`.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from routing.config.tuning import TuningSection
from routing.traces import TraceRequest
from sim.replay.settings import SimSettings
from sim.replay.sweep.runners import SweepRunner
from sim.tune.candidates import Candidate
from sim.tune.evaluate import Evaluation, FleetShape, Span, evaluate


@dataclass(frozen=True, slots=True)
class Proposal:
    """What one evaluation concluded (see the module docstring)."""

    live: str
    best: Candidate
    gain: float  # mean over seeds
    spread: float  # standard deviation over seeds (0 with one seed)
    win_share: float
    confident: bool
    predicted_ttft_s: float  # the best candidate's replayed mean TTFT, averaged over seeds
    live_ttft_s: float  # the live profile's, likewise
    evaluation: Evaluation

    @property
    def changes(self) -> bool:
        """Whether the proposal names another profile than the live one."""
        return self.best.name != self.live

    def reason(self) -> str:
        if not self.changes:
            return f"{self.live} is predicted best"
        verdict = "confident" if self.confident else "not confident enough"
        return (
            f"{self.best.name}: predicted mean TTFT {self.gain:+.1%} ± {self.spread:.1%} lower "
            f"than {self.live}, faster in {self.win_share:.0%} of seeds ({verdict})"
        )

    def to_json(self) -> dict[str, Any]:
        ev = self.evaluation
        table = [
            {
                "name": c.name,
                "origin": c.origin,
                "ttft_mean_s": [round(m, 6) for m in means],
                "gain": round(_mean_gain(means, ev.ttft_mean_s[0]), 4),
            }
            for c, means in zip(ev.candidates, ev.ttft_mean_s, strict=True)
        ]
        return {
            "live": self.live,
            "best": self.best.name,
            "best_profile": self.best.profile.model_dump(mode="json", exclude_unset=True),
            "predicted_gain": round(self.gain, 4),
            "spread": round(self.spread, 4),
            "win_share": round(self.win_share, 3),
            "confident": self.confident,
            "predicted_ttft_s": round(self.predicted_ttft_s, 6),
            "live_ttft_s": round(self.live_ttft_s, 6),
            "observed_ttft_s": ev.observed_ttft_mean_s,
            "fidelity": None if ev.fidelity is None else round(ev.fidelity, 4),
            "requests": ev.requests,
            "lead_in_requests": ev.lead_in_requests,
            "replay_cpu_s": round(ev.cpu_s, 3),
            "reason": self.reason(),
            "candidates": table,
        }


def gains(candidate: tuple[float, ...], live: tuple[float, ...]) -> list[float]:
    """Per seed: 1 − candidate / live (0 where the live TTFT is 0)."""
    return [1.0 - c / v if v > 0 else 0.0 for c, v in zip(candidate, live, strict=True)]


def _mean_gain(candidate: tuple[float, ...], live: tuple[float, ...]) -> float:
    return statistics.fmean(gains(candidate, live))


def best_index(evaluation: Evaluation) -> int:
    """The candidate with the highest mean gain over the live one (0, the live one, if none
    gains)."""
    live_means = evaluation.ttft_mean_s[0]
    best_i, best_gain = 0, 0.0
    for i, means in enumerate(evaluation.ttft_mean_s[1:], 1):
        gain = _mean_gain(means, live_means)
        if gain > best_gain:
            best_i, best_gain = i, gain
    return best_i


def propose(
    evaluation: Evaluation,
    min_gain: float,
    confidence: float,
    holdout: Evaluation | None = None,
) -> Proposal:
    """The proposal from an evaluation whose first candidate is the live profile; with
    `holdout` (the live and the best candidate on fresh seeds), its figures are the
    hold-out's."""
    best_i = best_index(evaluation)
    live_means, best_means = evaluation.ttft_mean_s[0], evaluation.ttft_mean_s[best_i]
    if holdout is not None and best_i:
        live_means, best_means = holdout.ttft_mean_s[0], holdout.ttft_mean_s[1]
    per_seed = gains(best_means, live_means)
    gain = statistics.fmean(per_seed)
    spread = statistics.stdev(per_seed) if len(per_seed) > 1 else 0.0
    wins = sum(g > 0 for g in per_seed) / len(per_seed)
    confident = best_i != 0 and gain >= min_gain and gain > spread and wins >= confidence
    return Proposal(
        live=evaluation.candidates[0].name,
        best=evaluation.candidates[best_i],
        gain=gain if best_i else 0.0,
        spread=spread if best_i else 0.0,
        win_share=wins if best_i else 0.0,
        confident=confident,
        predicted_ttft_s=statistics.fmean(best_means),
        live_ttft_s=statistics.fmean(live_means),
        evaluation=evaluation,
    )


def assess(
    trace: Sequence[TraceRequest] | Span,
    candidates: Sequence[Candidate],
    shape: FleetShape,
    base: SimSettings,
    tuning: TuningSection,
    *,
    runner: SweepRunner,
) -> Proposal:
    """Evaluate every candidate on `tuning.seeds` seeds, confirm the best on as many fresh
    ones, and propose (the live profile is `candidates[0]`; `trace`: the window, or a `Span`
    with its lead-in)."""
    seeds = tuning.seeds
    ev = evaluate(trace, candidates, shape, base, seeds=seeds, runner=runner)
    best = best_index(ev)
    holdout = None
    if best:
        pair = [candidates[0], candidates[best]]
        holdout = evaluate(trace, pair, shape, base, seeds=seeds, runner=runner, first_seed=seeds)
        ev = replace(ev, cpu_s=ev.cpu_s + holdout.cpu_s)
    return propose(ev, tuning.min_gain, tuning.confidence, holdout)
