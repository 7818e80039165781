from __future__ import annotations

import pytest

from routing.config.profiles import BUILTIN_PROFILES
from sim.tune.candidates import Candidate
from sim.tune.controller import TunerState, step
from sim.tune.evaluate import Evaluation
from sim.tune.proposal import Proposal, propose

LIVE = Candidate("prefix-aware", BUILTIN_PROFILES["prefix-aware"], "live")
LOAD = Candidate("least-load", BUILTIN_PROFILES["least-load"])
RR = Candidate("round-robin", BUILTIN_PROFILES["round-robin"])


def _evaluation(
    means: list[tuple[float, ...]], observed: float | None = None, cands: tuple = (LIVE, LOAD, RR)
) -> Evaluation:
    return Evaluation(cands, tuple(means), 100, observed, 1.0)


def test_the_best_mean_gain_wins_and_confidence_needs_every_condition() -> None:
    ev = _evaluation([(1.0, 1.0, 1.0), (0.8, 0.85, 0.9), (1.2, 0.5, 1.3)])
    p = propose(ev, min_gain=0.05, confidence=0.8)
    assert p.best is LOAD and p.changes and p.confident
    assert p.gain == pytest.approx(0.15) and p.win_share == 1.0
    assert p.spread == pytest.approx(0.05)
    assert not propose(ev, min_gain=0.2, confidence=0.8).confident
    noisy = _evaluation([(1.0, 1.0), (0.5, 1.3), (1.0, 1.0)], cands=(LIVE, LOAD, RR))
    assert not propose(noisy, 0.05, 0.5).confident  # gain 0.1 < spread 0.57


def test_the_hold_out_gives_the_figures() -> None:
    ev = _evaluation([(1.0, 1.0), (0.5, 0.5), (1.0, 1.0)])
    holdout = Evaluation((LIVE, LOAD), ((1.0, 1.0), (1.02, 0.98)), 100, None, 1.0)
    p = propose(ev, 0.05, 0.8, holdout)
    assert p.best is LOAD and p.gain == pytest.approx(0.0) and not p.confident


def test_no_better_candidate_keeps_the_live_one() -> None:
    p = propose(_evaluation([(1.0,), (1.1,), (1.5,)]), 0.0, 0.1)
    assert not p.changes and not p.confident and p.gain == 0.0
    assert p.reason() == "prefix-aware is predicted best"
    assert p.to_json()["candidates"][0]["name"] == "prefix-aware"


def _proposal(best: Candidate, gain: float, replayed: float, observed: float | None) -> Proposal:
    ev = _evaluation([(replayed,), (replayed * (1 - gain),), (9.0,)], observed)
    if best is not LOAD:
        ev = Evaluation((best, LOAD, RR), ev.ttft_mean_s, 100, observed, 1.0)
    return propose(ev, 0.05, 0.5)


def test_shadow_proposes_and_apply_switches_then_checks() -> None:
    state = TunerState(LIVE)
    p = _proposal(LIVE, 0.2, replayed=1.0, observed=2.0)  # the replay runs 2x fast
    same, action = step(state, p, "shadow", 0.2)
    assert same == state and action.kind == "propose" and action.target is LOAD
    switched, action = step(state, p, "apply", 0.2)
    assert action.kind == "switch" and switched.live is LOAD and switched.previous is LIVE
    assert switched.check is not None and switched.check.calibration == 2.0
    # Next window under LOAD: replayed 0.8 → expected observed 1.6; 1.7 is within 20 %.
    fine = _proposal(LOAD, 0.0, replayed=0.8, observed=1.7)
    kept, action = step(switched, fine, "apply", 0.2)
    assert action.kind == "keep" and kept.live is LOAD and kept.check is None


def test_a_switch_worse_than_its_bound_is_rolled_back_and_held() -> None:
    switched, _ = step(TunerState(LIVE), _proposal(LIVE, 0.2, 1.0, 1.0), "apply", 0.2)
    worse = _proposal(LOAD, 0.0, replayed=0.8, observed=1.2)  # expected 0.8, bound 0.96
    rolled, action = step(switched, worse, "apply", 0.2, windows=1)  # the first miss decides
    assert action.kind == "rollback" and action.target is LIVE and "exceeds" in action.reason
    assert rolled.live is LIVE and rolled.previous is LOAD and rolled.hold == 1
    again, action = step(rolled, _proposal(LIVE, 0.3, 1.0, 1.0), "apply", 0.2)
    assert action.kind == "keep" and "held" in action.reason and again.hold == 0
    _, action = step(again, _proposal(LIVE, 0.3, 1.0, 1.0), "apply", 0.2)
    assert action.kind == "switch"


def test_without_observed_ttfts_the_check_passes() -> None:
    switched, _ = step(TunerState(LIVE), _proposal(LIVE, 0.2, 1.0, None), "apply", 0.2)
    _, action = step(switched, _proposal(LOAD, 0.0, 5.0, None), "apply", 0.2)
    assert action.kind == "keep"
