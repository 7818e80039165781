from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from typing import Any

import pytest

from routing import PluginRegistry
from routing.registry import PluginError
from scoring.builtin import register_builtins
from tests.unit.scoring.helpers import registry as full_registry

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


# The parameters every plugin type declares, as `describe()` lists them. Changing one changes
# what users' config files mean: update the plugin's docstring and the golden runs with it.
DECLARED = {
    "filters": {
        "load-imbalance-filter": [
            "abs_threshold: float, >= 0, default 64.0",
            "rel_threshold: float, >= 1, default 1.5",
        ],
        "saturation-filter": [
            "queue_threshold: float, >= 0, default 5.0",
            "kv_threshold: float, >= 0 and <= 1, default 0.8",
        ],
    },
    "scorers": {
        "estimated-ttft-scorer": [
            "chars_per_token: float, > 0, default 4.0",
            "eviction_weight: float, >= 0, default 0.0",
            "cache_view: 'approximate' | 'precise', default 'approximate'",
        ]
    },
    "pickers": {"softmax-picker": ["temperature: float, > 0, default 0.1"]},
}


def test_describe_lists_every_declared_parameter() -> None:
    described = full_registry().describe()
    listed = {
        kind: {name: [str(spec) for spec in specs] for name, specs in types.items() if specs}
        for kind, types in described.items()
    }
    assert listed == DECLARED


def _maker(kind: str) -> Callable[[str, str, Mapping[str, Any]], Any]:
    plugins = full_registry()
    return {
        "filters": plugins.make_filter,
        "scorers": plugins.make_scorer,
        "pickers": plugins.make_picker,
    }[kind]


ALL_TYPES = [(kind, name) for kind, names in full_registry().types().items() for name in names]


@pytest.mark.parametrize(("kind", "type_name"), ALL_TYPES)
def test_every_type_names_its_instances_and_rejects_unknown_params(
    kind: str, type_name: str
) -> None:
    assert _maker(kind)(type_name, "mine", {}).name == "mine"
    singular = kind.removesuffix("s")
    with pytest.raises(
        PluginError, match=rf"^{singular} '{type_name}': unknown parameter.*'bogus'"
    ):
        _maker(kind)(type_name, "mine", {"bogus": 1})


@pytest.mark.parametrize(("kind", "type_name"), ALL_TYPES)
def test_each_plugin_docstring_states_its_type_and_parameters(kind: str, type_name: str) -> None:
    doc = sys.modules[type(_maker(kind)(type_name, "x", {})).__module__].__doc__ or ""
    assert doc.startswith(f"`{type_name}`: ")
    specs = full_registry().describe()[kind][type_name]
    if not specs:
        assert "Parameters: none" in doc
    for spec in specs:
        assert f"`{spec.name}`" in doc and "Parameters:" in doc
