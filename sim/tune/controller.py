"""What the tuner does with a proposal: nothing (`shadow`), or switch and check (`apply`).

`apply` switches to a confident proposal and keeps the profile it replaced. The next
evaluation checks the switch on the window after it (replayed after its lead-in), calibrated
by c = observed / replayed mean TTFT of the window before: the window misses when the observed
mean exceeds c·r_new·(1 + tolerance) and, where the old profile was replayed, c·r_old·(1 +
tolerance) (a backlog both would have drained is no fault of the switch). A miss rolls back
(and the next evaluation makes no switch) at once when the window's replays no longer rank
the new profile first; while they do, a burst both replays missed may be the cause, and it
rolls back after `windows` misses in a row. Without observed TTFTs the check passes.
Away from home (the configured profile) the live profile has to keep earning its place: with
no confident change, the tuner returns home (a switch, checked like one) when the live
profile's predicted lead over home (mean over seeds of 1 − live / home) is below half of
`min_gain`; between half and all of it, it stays (a band against flapping). Pure.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, replace

from sim.tune.candidates import Candidate
from sim.tune.proposal import Proposal, gains


@dataclass(frozen=True, slots=True)
class Check:
    """A switch waiting for the verdict of the window after it."""

    calibration: float | None  # observed / replayed mean TTFT before the switch
    predicted_gain: float
    misses: int = 0  # windows since the switch that missed without rolling it back


@dataclass(frozen=True, slots=True)
class TunerState:
    """The live profile, the one it replaced, and a pending check."""

    live: Candidate
    previous: Candidate | None = None
    check: Check | None = None
    hold: int = 0  # evaluations left without a switch (after a rollback)


@dataclass(frozen=True, slots=True)
class Action:
    """`keep`, `propose` (shadow), `switch` or `rollback`, to `target`, and why; for `switch`
    and `propose`, the target's predicted gain over the live profile."""

    kind: str
    target: Candidate
    reason: str
    gain: float | None = None


def step(
    state: TunerState,
    proposal: Proposal,
    mode: str,
    tolerance: float,
    *,
    home: Candidate | None = None,
    min_gain: float = 0.05,
    windows: int = 2,
) -> tuple[TunerState, Action]:
    """The state after `proposal` and the action taken (see the module docstring)."""
    if state.check is not None and state.previous is not None:
        miss = _check(state.check, proposal, state.previous, tolerance)
        if miss is not None:
            verdict, old_level_or_first = miss
            misses = state.check.misses + 1
            if old_level_or_first or misses >= windows:
                rolled = TunerState(state.previous, state.live, None, hold=1)
                return rolled, Action("rollback", state.previous, verdict)
            again = replace(state, check=replace(state.check, misses=misses))
            ranked = f", but this window's replays still rank {state.live.name} first"
            ranked = "" if old_level_or_first is None else ranked
            reason = f"{verdict}{ranked}: checked again ({misses} of {windows} windows missed)"
            return again, Action("keep", state.live, reason)
        state = replace(state, check=None)
    target, reason, gain = proposal.best, proposal.reason(), proposal.gain
    if not (proposal.changes and proposal.confident):
        back = None
        if mode == "apply" and not state.hold and home is not None:
            back = _home_ahead(state.live, proposal, home, min_gain)
        if back is None or home is None:
            return replace(state, hold=max(0, state.hold - 1)), Action("keep", state.live, reason)
        target, (reason, gain) = home, back
    if mode != "apply":
        return state, Action("propose", target, reason, gain)
    if state.hold:
        reason = f"{reason}; held after a rollback"
        return replace(state, hold=state.hold - 1), Action("keep", state.live, reason)
    ev = proposal.evaluation
    replayed = ev.ttft_mean_s[0][0]
    observed = ev.observed_ttft_mean_s
    calibration = observed / replayed if observed and replayed > 0 else None
    switched = TunerState(target, state.live, Check(calibration, gain))
    return switched, Action("switch", target, reason, gain)


def _home_ahead(
    live: Candidate, proposal: Proposal, home: Candidate, min_gain: float
) -> tuple[str, float] | None:
    """Why the tuner returns home from `live`, and home's predicted gain over it (None: it
    stays; see the module docstring)."""
    if live.name == home.name or live.profile == home.profile:  # at home already
        return None
    ev = proposal.evaluation
    at_home = ev.of_candidate(home)
    if at_home is None:
        return None
    lead = statistics.fmean(gains(ev.ttft_mean_s[0], at_home))  # 1 − live / home
    if lead >= min_gain / 2:
        return None
    reason = (
        f"{live.name} is no longer ahead of {home.name}: predicted mean TTFT {lead:+.1%} "
        f"lower (below half the {min_gain:.0%} a switch needs); back home"
    )
    return reason, statistics.fmean(gains(at_home, ev.ttft_mean_s[0]))


def _check(
    check: Check, proposal: Proposal, previous: Candidate, tolerance: float
) -> tuple[str, bool | None] | None:
    """Why the window misses for the switch under check (from `previous`), and whether its
    replays rank `previous` level or first (None: not replayed); None: the window holds."""
    ev = proposal.evaluation
    observed = ev.observed_ttft_mean_s
    if check.calibration is None or observed is None:
        return None
    new = ev.ttft_mean_s[0][0]
    expected = check.calibration * new
    if observed <= expected * (1 + tolerance):
        return None
    reason = (
        f"observed mean TTFT {observed:.3f} s after the switch exceeds the predicted "
        f"{expected:.3f} s by more than {tolerance:.0%}"
    )
    old = ev.of_candidate(previous)
    if old is None:
        return reason, None
    alternative = check.calibration * old[0]
    if observed <= alternative * (1 + tolerance):
        return None  # the old profile would have fared no better on this window
    return f"{reason}, and {previous.name} would have given {alternative:.3f} s", old[0] <= new
