"""The check of a switch on the window after it: like with like, lead-in included."""

from __future__ import annotations

from dataclasses import replace

from routing.config.profiles import BUILTIN_PROFILES
from sim.replay.settings import SimSettings
from sim.replay.sweep.runners import LocalRunner
from sim.tune.candidates import Candidate
from sim.tune.controller import Check, TunerState, step
from sim.tune.evaluate import Evaluation, FleetShape, evaluate, span
from sim.tune.proposal import propose
from tests.unit.sim.tune.test_evaluate import backlog_trace

OLD = Candidate("round-robin", BUILTIN_PROFILES["round-robin"])
NEW = Candidate("prefix-aware", BUILTIN_PROFILES["prefix-aware"], "live")
SWITCHED = TunerState(NEW, OLD, Check(calibration=1.0, predicted_gain=0.1))


def _after(new: float, old: float | None, observed: float) -> Evaluation:
    """The window after the switch: the new profile's replayed mean TTFT (and the old's)."""
    if old is None:
        return Evaluation((NEW,), ((new,),), 100, observed, 1.0)
    return Evaluation((NEW, OLD), ((new,), (old,)), 100, observed, 1.0)


def test_worse_than_predicted_but_no_worse_than_the_old_profile_stands() -> None:
    # Observed 1.5 s against 1.0 s predicted: beyond the 20 % tolerance. The old profile's
    # replay of the same window predicts 1.6 s: the switch made nothing worse.
    state, action = step(SWITCHED, propose(_after(1.0, 1.6, 1.5), 0.05, 0.8), "apply", 0.2)
    assert action.kind == "keep" and state.live is NEW and state.check is None


def test_a_miss_whose_replays_show_no_gain_rolls_back_at_once() -> None:
    # Observed 1.5 s, beyond both calibrated replays; the old profile replays faster (0.9 s
    # against 1.0 s): the replays agree with the observation.
    state, action = step(SWITCHED, propose(_after(1.0, 0.9, 1.5), 0.05, 0.8), "apply", 0.2)
    assert action.kind == "rollback" and action.target is OLD and state.hold == 1
    assert state.live is OLD and state.previous is NEW and state.check is None
    assert "round-robin would have given 0.900 s" in action.reason
    # Replayed level (the switch changed no decision in this window): no reason to keep it.
    _, action = step(SWITCHED, propose(_after(1.0, 1.0, 1.5), 0.05, 0.8), "apply", 0.2)
    assert action.kind == "rollback"


def test_a_miss_the_replays_do_not_see_is_checked_again_before_a_rollback() -> None:
    """A burst the replays missed makes the fleet slower than both replays while they still
    rank the new profile first: one such window keeps it; a second in a row rolls it back."""
    window = propose(_after(1.0, 1.1, 1.5), 0.05, 0.8)
    state, action = step(SWITCHED, window, "apply", 0.2)
    assert action.kind == "keep" and state.live is NEW and state.check is not None
    assert state.check.misses == 1 and "1 of 2 windows missed" in action.reason
    assert "replays still rank prefix-aware first" in action.reason
    state, action = step(state, window, "apply", 0.2)
    assert action.kind == "rollback" and state.live is OLD and state.hold == 1
    # With one window asked for, the first miss decides.
    _, action = step(SWITCHED, window, "apply", 0.2, windows=1)
    assert action.kind == "rollback"


def test_a_window_that_holds_after_a_miss_ends_the_check() -> None:
    state, _ = step(SWITCHED, propose(_after(1.0, 1.1, 1.5), 0.05, 0.8), "apply", 0.2)
    state, action = step(state, propose(_after(1.0, 1.1, 1.1), 0.05, 0.8), "apply", 0.2)
    assert action.kind == "keep" and state.live is NEW and state.check is None
    # A later miss is no longer a check's: nothing is rolled back.
    state, action = step(state, propose(_after(1.0, 1.1, 1.5), 0.05, 0.8), "apply", 0.2)
    assert action.kind == "keep" and state.live is NEW


def test_without_the_old_profile_replayed_a_miss_needs_the_windows_asked_for() -> None:
    state, action = step(SWITCHED, propose(_after(1.0, None, 1.5), 0.05, 0.8), "apply", 0.2)
    assert action.kind == "keep" and state.check is not None and state.check.misses == 1
    assert "still rank" not in action.reason and "checked again" in action.reason
    _, action = step(state, propose(_after(1.0, None, 1.5), 0.05, 0.8), "apply", 0.2)
    assert action.kind == "rollback" and "round-robin would" not in action.reason
    _, action = step(SWITCHED, propose(_after(1.0, None, 1.1), 0.05, 0.8), "apply", 0.2)
    assert action.kind == "keep"


def test_a_backlog_built_before_the_switch_is_no_reason_to_roll_it_back() -> None:
    """The window after a switch drains a burst that arrived before it. Replayed cold (no
    lead-in: the tuner's behaviour before lead-ins), both profiles look fast and the observed
    TTFTs condemn the switch; replayed after the burst, the prediction holds."""
    shape = FleetShape.of(2, "demo", block_size=16, num_blocks=400)
    trace = backlog_trace()
    runner = LocalRunner(1)
    # What the fleet observed after the switch: the replay with the burst (calibration 1).
    truth = evaluate(span(trace, 20.0, 10.0, 10.0, OLD), [NEW], shape, SimSettings(), seeds=1,
                     runner=runner).ttft_mean_s[0][0]  # fmt: skip
    observed = [replace(r, ttft_s=truth) for r in trace]
    actions = {}
    for lead_in in (0.0, 10.0):
        part = span(observed, 20.0, 10.0, lead_in, OLD)
        ev = evaluate(part, [NEW, OLD], shape, SimSettings(), seeds=1, runner=runner)
        _, action = step(SWITCHED, propose(ev, 0.05, 0.8), "apply", 0.2, windows=1)
        actions[lead_in] = action.kind
    assert actions == {0.0: "rollback", 10.0: "keep"}
