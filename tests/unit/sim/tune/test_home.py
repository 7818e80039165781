"""Away from the configured profile, the live one has to keep earning its place."""

from __future__ import annotations

from routing.config.profiles import BUILTIN_PROFILES
from sim.tune.candidates import Candidate
from sim.tune.controller import Action, TunerState, step
from sim.tune.evaluate import Evaluation
from sim.tune.proposal import Proposal, propose

HOME = Candidate("prefix-aware", BUILTIN_PROFILES["prefix-aware"])
AWAY = Candidate("least-load", BUILTIN_PROFILES["least-load"], "live")
THIRD = Candidate("estimated-ttft", BUILTIN_PROFILES["estimated-ttft"])
AWAY_STATE = TunerState(AWAY, HOME)


Means = tuple[float, ...]


def _window(away: Means, home: Means, third: Means | None = None) -> Proposal:
    """One window's replays (seconds per seed): the live (away) profile first."""
    cands = (AWAY, HOME) if third is None else (AWAY, HOME, THIRD)
    means = (away, home) if third is None else (away, home, third)
    return propose(Evaluation(cands, means, 100, None, 1.0), 0.05, 0.8)


def _step(
    state: TunerState, away: Means, home: Means, third: Means | None = None, mode: str = "apply"
) -> tuple[TunerState, Action]:
    return step(state, _window(away, home, third), mode, 0.2, home=HOME, min_gain=0.05)


def test_a_profile_no_longer_ahead_of_home_returns_there() -> None:
    # Home replays 2 % slower than the live profile (1 − 1.00 / 1.02): below half the 5 % a
    # switch needs. Not a confident switch on its own, but the live one no longer earns its
    # place.
    state, action = _step(AWAY_STATE, (1.00, 1.00), (1.02, 1.02))
    assert action.kind == "switch" and action.target is HOME
    assert state.live is HOME and state.previous is AWAY and state.check is not None
    assert "no longer ahead of prefix-aware" in action.reason and "back home" in action.reason
    # Home's own predicted gain over the live profile: 1 − 1.02 / 1.00 = −2 %.
    assert action.gain is not None and abs(action.gain + 0.02) < 1e-9


def test_home_faster_returns_there() -> None:
    _, action = _step(AWAY_STATE, (1.00, 1.00), (0.90, 0.95))
    assert action.kind == "switch" and action.target is HOME


def test_within_the_band_the_live_profile_stays() -> None:
    # 1 − 1.00 / 1.04 = 3.8 %: short of the 5 % a switch needs, above the 2.5 % to stay.
    state, action = _step(AWAY_STATE, (1.00, 1.00), (1.04, 1.04))
    assert action.kind == "keep" and state.live is AWAY


def test_a_profile_still_well_ahead_stays() -> None:
    state, action = _step(AWAY_STATE, (1.00, 1.00), (1.20, 1.30))
    assert action.kind == "keep" and state.live is AWAY


def test_a_confident_change_elsewhere_goes_there_not_home() -> None:
    _, action = _step(AWAY_STATE, (1.00, 1.00), (1.01, 1.01), third=(0.50, 0.50))
    assert action.kind == "switch" and action.target is THIRD and action.gain == 0.5


def test_after_a_rollback_the_hold_keeps_the_live_profile_one_evaluation() -> None:
    held = TunerState(AWAY, HOME, None, hold=1)
    state, action = _step(held, (1.00, 1.00), (1.00, 1.00))
    assert action.kind == "keep" and state.live is AWAY and state.hold == 0
    _, action = _step(state, (1.00, 1.00), (1.00, 1.00))
    assert action.kind == "switch" and action.target is HOME


def test_at_home_or_in_shadow_nothing_moves() -> None:
    at_home = TunerState(Candidate(HOME.name, HOME.profile, "live"))
    _, action = step(at_home, propose(Evaluation((at_home.live, AWAY), ((1.0,), (1.01,)), 100,
                     None, 1.0), 0.05, 0.8), "apply", 0.2, home=HOME)  # fmt: skip
    assert action.kind == "keep"
    _, action = _step(AWAY_STATE, (1.00, 1.00), (1.00, 1.00), mode="shadow")
    assert action.kind == "keep"
