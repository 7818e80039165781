"""What the tuner does with a proposal: nothing (`shadow`), or switch and check (`apply`).

`apply` switches to a confident proposal and keeps the profile it replaced. The first
evaluation after a switch checks it, on the window after the switch replayed after its
lead-in (the traffic before the switch, routed by the old profile: the queues and caches the
switch inherited are in the replays). The calibration c = observed / replayed mean TTFT of
the window before the switch turns a replayed TTFT r of the window after it into an expected
observed TTFT c·r. The switch is rolled back to the previous profile, and the next evaluation
makes no switch, when the observed mean o exceeds both c·r_new·(1 + tolerance) (the new
profile did worse than predicted) and c·r_old·(1 + tolerance) (the old profile, replayed on
the same window, would have done better): a backlog that both would have drained is no
fault of the switch. Without the old profile's replay, the first condition decides. Without
observed TTFTs (offline traces) the check has nothing to compare and passes. Pure: the
caller carries the state.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from sim.tune.candidates import Candidate
from sim.tune.proposal import Proposal


@dataclass(frozen=True, slots=True)
class Check:
    """A switch waiting for the verdict of the window after it."""

    calibration: float | None  # observed / replayed mean TTFT before the switch
    predicted_gain: float


@dataclass(frozen=True, slots=True)
class TunerState:
    """The live profile, the one it replaced, and a pending check."""

    live: Candidate
    previous: Candidate | None = None
    check: Check | None = None
    hold: int = 0  # evaluations left without a switch (after a rollback)


@dataclass(frozen=True, slots=True)
class Action:
    """`keep`, `propose` (shadow), `switch` or `rollback`, to `target`, and why."""

    kind: str
    target: Candidate
    reason: str


def step(
    state: TunerState, proposal: Proposal, mode: str, tolerance: float
) -> tuple[TunerState, Action]:
    """The state after `proposal` and the action taken (see the module docstring)."""
    if state.check is not None and state.previous is not None:
        verdict = _check(state.check, proposal, state.previous, tolerance)
        if verdict is not None:
            rolled = TunerState(state.previous, state.live, None, hold=1)
            return rolled, Action("rollback", state.previous, verdict)
        state = replace(state, check=None)
    if not (proposal.changes and proposal.confident):
        return replace(state, hold=max(0, state.hold - 1)), Action(
            "keep", state.live, proposal.reason()
        )
    if mode != "apply":
        return state, Action("propose", proposal.best, proposal.reason())
    if state.hold:
        reason = f"{proposal.reason()}; held after a rollback"
        return replace(state, hold=state.hold - 1), Action("keep", state.live, reason)
    ev = proposal.evaluation
    replayed = ev.ttft_mean_s[0][0]
    observed = ev.observed_ttft_mean_s
    calibration = observed / replayed if observed and replayed > 0 else None
    switched = TunerState(proposal.best, state.live, Check(calibration, proposal.gain))
    return switched, Action("switch", proposal.best, proposal.reason())


def _check(check: Check, proposal: Proposal, previous: Candidate, tolerance: float) -> str | None:
    """Why the switch under check (from `previous`) fails (None: it stands)."""
    ev = proposal.evaluation
    observed = ev.observed_ttft_mean_s
    if check.calibration is None or observed is None:
        return None
    expected = check.calibration * ev.ttft_mean_s[0][0]
    if observed <= expected * (1 + tolerance):
        return None
    reason = (
        f"observed mean TTFT {observed:.3f} s after the switch exceeds the predicted "
        f"{expected:.3f} s by more than {tolerance:.0%}"
    )
    old = ev.of_candidate(previous)
    if old is None:
        return reason
    alternative = check.calibration * old[0]
    if observed <= alternative * (1 + tolerance):
        return None  # the old profile would have fared no better on this window
    return f"{reason}, and {previous.name} would have given {alternative:.3f} s"
