"""Registration of the built-in plugins, called explicitly by the composition root."""

from __future__ import annotations

from routing import PluginRegistry
from scoring.in_flight import InFlightScorer
from scoring.max_score import MaxScorePicker
from scoring.power_of_two import PowerOfTwoPicker
from scoring.random_picker import RandomPicker
from scoring.round_robin import RoundRobinPicker
from scoring.session_affinity import SessionAffinityScorer


def register_builtins(registry: PluginRegistry) -> None:
    """Register every built-in filter, scorer and picker under its config type name."""
    registry.register_scorer("in-flight-scorer", InFlightScorer.from_params)
    registry.register_scorer("session-affinity-scorer", SessionAffinityScorer.from_params)
    registry.register_picker("round-robin-picker", RoundRobinPicker.from_params)
    registry.register_picker("random-picker", RandomPicker.from_params)
    registry.register_picker("max-score-picker", MaxScorePicker.from_params)
    registry.register_picker("power-of-two-picker", PowerOfTwoPicker.from_params)
