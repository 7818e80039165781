from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated

import pytest

from routing import (
    EndpointScores,
    EndpointSnapshot,
    PluginRegistry,
    RoutingRequest,
    SchedulingContext,
)
from routing.params import Bounds, ParamSpec
from routing.registry import PluginError


class Plugin:
    """Stands in for a filter, scorer and picker; takes no parameters."""

    def __init__(self, name: str) -> None:
        self.name = name

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


class Tuned(Plugin):
    """Declares parameters; refuses `rate` 13 itself, as a plugin may check more."""

    @dataclass(frozen=True, slots=True)
    class Params:
        rate: Annotated[float, Bounds(gt=0.0)] = 2.0
        depth: Annotated[int, Bounds(ge=1, le=8)] = 4

    def __init__(self, name: str, params: Params = Params()) -> None:
        if params.rate == 13:
            raise ValueError("unlucky rate")
        super().__init__(name)
        self.params = params


class Stateful(Plugin):
    """Reads two objects the composition root injects, and takes parameters."""

    Params = Tuned.Params

    def __init__(
        self, name: str, store: list[str], tag: str, params: Tuned.Params = Tuned.Params()
    ) -> None:
        super().__init__(name)
        self.store, self.tag, self.params = store, tag, params


STORE: list[str] = []


def _registry() -> PluginRegistry:
    registry = PluginRegistry()
    registry.register_filter("f-type", Plugin)
    registry.register_scorer("s-type", Plugin)
    registry.register_scorer("tuned-scorer", Tuned)
    registry.register_scorer("stateful-scorer", Stateful, deps=(STORE, "t"))
    registry.register_picker("p-type", Plugin)
    return registry


def test_types_lists_each_kind_sorted() -> None:
    assert _registry().types() == {
        "filters": ["f-type"],
        "scorers": ["s-type", "stateful-scorer", "tuned-scorer"],
        "pickers": ["p-type"],
    }


def test_make_passes_the_name_and_builds_fresh_instances() -> None:
    registry = _registry()
    made = registry.make_scorer("s-type", "mine", {})
    assert isinstance(made, Plugin) and made.name == "mine"
    assert registry.make_scorer("s-type", "mine", {}) is not made
    assert registry.make_filter("f-type", "flt", {}).name == "flt"
    assert registry.make_picker("p-type", "pck", {}).name == "pck"


def test_declared_params_arrive_parsed_with_defaults_for_absent_keys() -> None:
    made = _registry().make_scorer("tuned-scorer", "t", {"rate": 3})
    assert isinstance(made, Tuned)
    assert made.params == Tuned.Params(rate=3.0, depth=4)
    default = _registry().make_scorer("tuned-scorer", "t", {})
    assert isinstance(default, Tuned) and default.params == Tuned.Params()


def test_deps_are_injected_before_the_params() -> None:
    made = _registry().make_scorer("stateful-scorer", "st", {"depth": 2})
    assert isinstance(made, Stateful)
    assert made.store is STORE and made.tag == "t"
    assert made.params == Tuned.Params(depth=2)


def test_any_callable_without_params_registers_as_a_factory() -> None:
    registry = PluginRegistry()
    shared = Plugin("shared")
    registry.register_scorer("recording-scorer", lambda name: shared)
    assert registry.make_scorer("recording-scorer", "x", {}) is shared
    with pytest.raises(PluginError, match=r"unknown parameter\(s\) 'k' \(accepted: none\)"):
        registry.make_scorer("recording-scorer", "x", {"k": 1})


def test_kinds_are_separate_tables() -> None:
    with pytest.raises(PluginError, match="unknown picker type 's-type'"):
        _registry().make_picker("s-type", "x", {})


def test_duplicate_registration_is_rejected() -> None:
    registry = _registry()
    with pytest.raises(PluginError, match="'s-type' is already registered"):
        registry.register_scorer("s-type", Plugin)


def test_unknown_type_lists_the_known_ones() -> None:
    with pytest.raises(
        PluginError, match=r"unknown scorer type 'x' \(known: s-type, stateful-scorer, tuned-"
    ):
        _registry().make_scorer("x", "x", {})
    with pytest.raises(PluginError, match=r"unknown filter type 'x' \(known: none\)"):
        PluginRegistry().make_filter("x", "x", {})


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"bogus": 1}, r"unknown parameter\(s\) 'bogus' \(accepted: depth, rate\)"),
        ({"rate": "fast"}, "parameter 'rate' must be a finite number and > 0, got 'fast'"),
        ({"rate": True}, "parameter 'rate' must be a finite number and > 0, got True"),
        ({"rate": 0}, "parameter 'rate' must be a finite number and > 0, got 0"),
        ({"rate": 10**400}, r"parameter 'rate' must be a finite number and > 0, got 1000+\.\.\."),
        ({"depth": 9}, "parameter 'depth' must be an integer and >= 1 and <= 8, got 9"),
        ({"depth": 2.0}, "parameter 'depth' must be an integer and >= 1 and <= 8, got 2.0"),
        ({"rate": 13}, "unlucky rate"),
    ],
)
def test_param_errors_name_kind_type_parameter_and_bound(
    params: dict[str, object], message: str
) -> None:
    with pytest.raises(PluginError, match=f"^scorer 'tuned-scorer': {message}") as info:
        _registry().make_scorer("tuned-scorer", "t", params)
    assert isinstance(info.value.__cause__, ValueError)


def test_name_must_be_a_non_empty_string_and_params_a_mapping() -> None:
    registry = _registry()
    with pytest.raises(PluginError, match="filter 'f-type': plugin name must be a non-empty"):
        registry.make_filter("f-type", "", {})
    with pytest.raises(PluginError, match="picker 'p-type': params must be a mapping, got list"):
        registry.make_picker("p-type", "p", ["k"])  # type: ignore[arg-type]


def test_constructor_type_errors_become_plugin_errors() -> None:
    registry = PluginRegistry()
    registry.register_scorer("needs-dep", Stateful)  # the deps were forgotten
    with pytest.raises(PluginError, match="scorer 'needs-dep': ") as info:
        registry.make_scorer("needs-dep", "x", {})
    assert isinstance(info.value.__cause__, TypeError)


def test_a_broken_declaration_fails_at_registration() -> None:
    class Broken(Plugin):
        @dataclass(frozen=True)
        class Params:
            rate: Annotated[float, Bounds(gt=0.0)] = 0.0

    with pytest.raises(TypeError, match="plugin type 'broken': invalid default"):
        PluginRegistry().register_scorer("broken", Broken)


def test_describe_lists_each_types_parameters() -> None:
    described = _registry().describe()
    assert list(described) == ["filters", "scorers", "pickers"]
    assert described["filters"] == {"f-type": ()}
    assert list(described["scorers"]) == ["s-type", "stateful-scorer", "tuned-scorer"]
    assert described["scorers"]["tuned-scorer"] == (
        ParamSpec("rate", float, 2.0, Bounds(gt=0.0)),
        ParamSpec("depth", int, 4, Bounds(ge=1, le=8)),
    )


def test_plugin_error_is_a_value_error() -> None:
    assert issubclass(PluginError, ValueError)
