from __future__ import annotations

import pytest

from routing import PluginRegistry
from routing.registry import PluginError
from scoring.builtin import register_builtins

EXPECTED = {
    "filters": ["load-imbalance-filter", "saturation-filter"],
    "scorers": [
        "in-flight-scorer",
        "kv-utilization-scorer",
        "lora-affinity-scorer",
        "queue-depth-scorer",
        "running-requests-scorer",
        "session-affinity-scorer",
    ],
    "pickers": [
        "max-score-picker",
        "power-of-two-picker",
        "random-picker",
        "round-robin-picker",
        "softmax-picker",
        "weighted-random-picker",
    ],
}


def test_registers_every_builtin_by_type_name() -> None:
    registry = PluginRegistry()
    register_builtins(registry)
    assert registry.types() == EXPECTED


def test_nothing_registers_at_import() -> None:
    assert PluginRegistry().types() == {"filters": [], "scorers": [], "pickers": []}


def test_registering_twice_is_an_error() -> None:
    registry = PluginRegistry()
    register_builtins(registry)
    with pytest.raises(PluginError, match="already registered"):
        register_builtins(registry)


@pytest.mark.parametrize("type_name", EXPECTED["filters"])
def test_filter_factories_name_instances_and_reject_unknown_params(type_name: str) -> None:
    registry = PluginRegistry()
    register_builtins(registry)
    assert registry.make_filter(type_name, "mine", {}).name == "mine"
    with pytest.raises(PluginError, match=rf"filter '{type_name}': unknown parameter.*'bogus'"):
        registry.make_filter(type_name, "mine", {"bogus": 1})


@pytest.mark.parametrize("type_name", EXPECTED["scorers"])
def test_scorer_factories_name_instances_and_reject_unknown_params(type_name: str) -> None:
    registry = PluginRegistry()
    register_builtins(registry)
    assert registry.make_scorer(type_name, "mine", {}).name == "mine"
    with pytest.raises(PluginError, match=rf"scorer '{type_name}': unknown parameter.*'bogus'"):
        registry.make_scorer(type_name, "mine", {"bogus": 1})


@pytest.mark.parametrize("type_name", EXPECTED["pickers"])
def test_picker_factories_name_instances_and_reject_unknown_params(type_name: str) -> None:
    registry = PluginRegistry()
    register_builtins(registry)
    assert registry.make_picker(type_name, "mine", {}).name == "mine"
    with pytest.raises(PluginError, match=rf"picker '{type_name}': unknown parameter.*'bogus'"):
        registry.make_picker(type_name, "mine", {"bogus": 1})
