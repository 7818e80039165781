from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from routing import (
    EndpointScores,
    EndpointSnapshot,
    PluginRegistry,
    RoutingRequest,
    SchedulingContext,
)
from routing.registry import PluginError


class Plugin:
    """Stands in for a filter, scorer and picker; records how it was built."""

    def __init__(self, name: str, params: Mapping[str, Any]) -> None:
        if "bad" in params:
            raise ValueError("bad must not be set")
        self.name = name
        self.params = params

    def filter(
        self, request: RoutingRequest, endpoints: Sequence[EndpointSnapshot], ctx: SchedulingContext
    ) -> Sequence[EndpointSnapshot]:
        return endpoints

    def score(
        self, request: RoutingRequest, endpoints: Sequence[EndpointSnapshot], ctx: SchedulingContext
    ) -> Mapping[str, float]:
        return {}

    def pick(
        self, request: RoutingRequest, scored: Sequence[EndpointScores], ctx: SchedulingContext
    ) -> Sequence[str]:
        return []


def _needs_int(name: str, params: Mapping[str, Any]) -> Plugin:
    int(params["n"])
    return Plugin(name, params)


def _registry() -> PluginRegistry:
    registry = PluginRegistry()
    registry.register_filter("f-type", Plugin)
    registry.register_scorer("s-type", Plugin)
    registry.register_scorer("typed-scorer", _needs_int)
    registry.register_picker("p-type", Plugin)
    return registry


def test_types_lists_each_kind_sorted() -> None:
    assert _registry().types() == {
        "filters": ["f-type"],
        "scorers": ["s-type", "typed-scorer"],
        "pickers": ["p-type"],
    }


def test_make_passes_name_and_params_and_builds_fresh_instances() -> None:
    registry = _registry()
    made = registry.make_scorer("s-type", "mine", {"k": 1})
    assert isinstance(made, Plugin)
    assert made.name == "mine"
    assert made.params == {"k": 1}
    assert registry.make_scorer("s-type", "mine", {}) is not made
    assert registry.make_filter("f-type", "flt", {}).name == "flt"
    assert registry.make_picker("p-type", "pck", {}).name == "pck"


def test_kinds_are_separate_tables() -> None:
    with pytest.raises(PluginError, match="unknown picker type 's-type'"):
        _registry().make_picker("s-type", "x", {})


def test_duplicate_registration_is_rejected() -> None:
    registry = _registry()
    with pytest.raises(PluginError, match="'s-type' is already registered"):
        registry.register_scorer("s-type", Plugin)


def test_unknown_type_lists_the_known_ones() -> None:
    with pytest.raises(
        PluginError, match=r"unknown scorer type 'x' \(known: s-type, typed-scorer\)"
    ):
        _registry().make_scorer("x", "x", {})
    with pytest.raises(PluginError, match=r"unknown filter type 'x' \(known: none\)"):
        PluginRegistry().make_filter("x", "x", {})


def test_factory_errors_become_plugin_errors_naming_kind_and_type() -> None:
    registry = _registry()
    with pytest.raises(PluginError, match="filter 'f-type': bad must not be set") as info:
        registry.make_filter("f-type", "x", {"bad": True})
    assert isinstance(info.value.__cause__, ValueError)
    with pytest.raises(PluginError, match="scorer 'typed-scorer': ") as info:
        registry.make_scorer("typed-scorer", "x", {"n": None})
    assert isinstance(info.value.__cause__, TypeError)


def test_plugin_error_is_a_value_error() -> None:
    assert issubclass(PluginError, ValueError)
