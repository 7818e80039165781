"""Plugin registry: maps plugin type names (as written in config) to factories.

Nothing registers at import time; the composition root (gateway or simulator) registers the
built-ins explicitly and may add its own.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from routing.protocols import Filter, Picker, Scorer

FilterFactory = Callable[[str, Mapping[str, Any]], Filter]
ScorerFactory = Callable[[str, Mapping[str, Any]], Scorer]
PickerFactory = Callable[[str, Mapping[str, Any]], Picker]

_P = TypeVar("_P")


class PluginError(ValueError):
    """A plugin type is unknown, registered twice, or rejected its parameters."""


class PluginRegistry:
    """Factories for filters, scorers and pickers, by type name (e.g. `in-flight-scorer`)."""

    def __init__(self) -> None:
        self._filters: dict[str, FilterFactory] = {}
        self._scorers: dict[str, ScorerFactory] = {}
        self._pickers: dict[str, PickerFactory] = {}

    def register_filter(self, type_name: str, factory: FilterFactory) -> None:
        _add(self._filters, type_name, factory)

    def register_scorer(self, type_name: str, factory: ScorerFactory) -> None:
        _add(self._scorers, type_name, factory)

    def register_picker(self, type_name: str, factory: PickerFactory) -> None:
        _add(self._pickers, type_name, factory)

    def types(self) -> dict[str, list[str]]:
        return {
            "filters": sorted(self._filters),
            "scorers": sorted(self._scorers),
            "pickers": sorted(self._pickers),
        }

    def make_filter(self, type_name: str, name: str, params: Mapping[str, Any]) -> Filter:
        return _make(self._filters, "filter", type_name, name, params)

    def make_scorer(self, type_name: str, name: str, params: Mapping[str, Any]) -> Scorer:
        return _make(self._scorers, "scorer", type_name, name, params)

    def make_picker(self, type_name: str, name: str, params: Mapping[str, Any]) -> Picker:
        return _make(self._pickers, "picker", type_name, name, params)


def _add(table: dict[str, Any], type_name: str, factory: Any) -> None:
    if type_name in table:
        raise PluginError(f"plugin type {type_name!r} is already registered")
    table[type_name] = factory


def _make(
    table: Mapping[str, Callable[[str, Mapping[str, Any]], _P]],
    kind: str,
    type_name: str,
    name: str,
    params: Mapping[str, Any],
) -> _P:
    try:
        factory = table[type_name]
    except KeyError:
        known = ", ".join(sorted(table)) or "none"
        raise PluginError(f"unknown {kind} type {type_name!r} (known: {known})") from None
    try:
        return factory(name, params)
    except (TypeError, ValueError) as exc:
        raise PluginError(f"{kind} {type_name!r}: {exc}") from exc
