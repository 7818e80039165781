from __future__ import annotations

from collections.abc import Callable

from routing.traces.load import FORMATS
from sim.replay import cli as replay_cli
from sim.replay import sweep


def test_sim_help_defaults_are_the_simulators_own(help_text: Callable[..., str]) -> None:
    sim_help = help_text("sim")
    assert f"(default {replay_cli.DEFAULT_PROFILE})" in sim_help
    assert f"(default: {','.join(replay_cli.DEFAULT_POLICIES)})" in sim_help
    assert f"trace format: {', '.join(FORMATS)}" in sim_help
    sweep_help = help_text("sim", "sweep")
    assert f"(default {sweep.DEFAULT_POLICIES})" in sweep_help
    assert f"(default {sweep.DEFAULT_OBJECTIVE})" in sweep_help
