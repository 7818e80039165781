"""Registration of the built-in plugins, called explicitly by the composition root."""

from __future__ import annotations

from routing import PluginRegistry
from scoring.filters.load_imbalance import LoadImbalanceFilter
from scoring.filters.saturation import SaturationFilter
from scoring.pickers.max_score import MaxScorePicker
from scoring.pickers.power_of_two import PowerOfTwoPicker
from scoring.pickers.random_picker import RandomPicker
from scoring.pickers.round_robin import RoundRobinPicker
from scoring.pickers.softmax import SoftmaxPicker
from scoring.pickers.weighted_random import WeightedRandomPicker
from scoring.scorers.in_flight import InFlightScorer
from scoring.scorers.kv_utilization import KvUtilizationScorer
from scoring.scorers.lora_affinity import LoraAffinityScorer
from scoring.scorers.queue_depth import QueueDepthScorer
from scoring.scorers.running_requests import RunningRequestsScorer
from scoring.scorers.session_affinity import SessionAffinityScorer


def register_builtins(registry: PluginRegistry) -> None:
    """Register every built-in filter, scorer and picker under its config type name."""
    registry.register_filter("saturation-filter", SaturationFilter)
    registry.register_filter("load-imbalance-filter", LoadImbalanceFilter)
    registry.register_scorer("in-flight-scorer", InFlightScorer)
    registry.register_scorer("kv-utilization-scorer", KvUtilizationScorer)
    registry.register_scorer("queue-depth-scorer", QueueDepthScorer)
    registry.register_scorer("running-requests-scorer", RunningRequestsScorer)
    registry.register_scorer("lora-affinity-scorer", LoraAffinityScorer)
    registry.register_scorer("session-affinity-scorer", SessionAffinityScorer)
    registry.register_picker("round-robin-picker", RoundRobinPicker)
    registry.register_picker("random-picker", RandomPicker)
    registry.register_picker("max-score-picker", MaxScorePicker)
    registry.register_picker("power-of-two-picker", PowerOfTwoPicker)
    registry.register_picker("weighted-random-picker", WeightedRandomPicker)
    registry.register_picker("softmax-picker", SoftmaxPicker)
