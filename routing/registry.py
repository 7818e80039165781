"""Plugin registry: maps plugin type names (as written in config) to plugin classes.

A class is registered under its type name, with `deps`, the objects the composition root owns
and injects (a prefix index, a TTFT model), if it reads any. Its parameters are those its
`Params` dataclass declares (see `routing.params`); a class without `Params` takes none. For
each config entry the registry checks the params against the declaration, then builds
`cls(name, *deps, params=Params(...))`, or `cls(name, *deps)` for a class without parameters:

    registry.register_scorer("in-flight-scorer", InFlightScorer)
    registry.register_scorer("prefix-match-scorer", PrefixMatchScorer, deps=(index,))

Nothing registers at import time; the composition root (gateway or simulator) registers the
built-ins explicitly and may add its own. `describe()` lists every type's parameters.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from routing.params import ParamSchema, ParamSpec
from routing.protocols import Filter, Picker, Scorer

_P = TypeVar("_P")


class PluginError(ValueError):
    """A plugin type is unknown, registered twice, or rejected its parameters."""


@dataclass(frozen=True, slots=True)
class _Entry(Generic[_P]):
    build: Callable[..., _P]
    deps: tuple[object, ...]
    schema: ParamSchema


class PluginRegistry:
    """Filter, scorer and picker classes by type name (e.g. `in-flight-scorer`)."""

    def __init__(self) -> None:
        self._filters: dict[str, _Entry[Filter]] = {}
        self._scorers: dict[str, _Entry[Scorer]] = {}
        self._pickers: dict[str, _Entry[Picker]] = {}

    def register_filter(
        self, type_name: str, plugin: Callable[..., Filter], *, deps: Sequence[object] = ()
    ) -> None:
        _add(self._filters, type_name, plugin, deps)

    def register_scorer(
        self, type_name: str, plugin: Callable[..., Scorer], *, deps: Sequence[object] = ()
    ) -> None:
        _add(self._scorers, type_name, plugin, deps)

    def register_picker(
        self, type_name: str, plugin: Callable[..., Picker], *, deps: Sequence[object] = ()
    ) -> None:
        _add(self._pickers, type_name, plugin, deps)

    def types(self) -> dict[str, list[str]]:
        return {
            "filters": sorted(self._filters),
            "scorers": sorted(self._scorers),
            "pickers": sorted(self._pickers),
        }

    def plugin(self, kind: str, type_name: str) -> Callable[..., object]:
        """What builds a type of `kind` (filters, scorers, pickers): its class, for docs."""
        tables: dict[str, Mapping[str, _Entry[Any]]] = {
            "filters": self._filters,
            "scorers": self._scorers,
            "pickers": self._pickers,
        }
        return tables[kind][type_name].build

    def describe(self) -> dict[str, dict[str, tuple[ParamSpec, ...]]]:
        """Each kind's type names, sorted, with the parameters each declares."""
        tables: dict[str, Mapping[str, _Entry[Any]]] = {
            "filters": self._filters,
            "scorers": self._scorers,
            "pickers": self._pickers,
        }
        return {
            kind: {name: table[name].schema.specs for name in sorted(table)}
            for kind, table in tables.items()
        }

    def make_filter(self, type_name: str, name: str, params: Mapping[str, Any]) -> Filter:
        return _make(self._filters, "filter", type_name, name, params)

    def make_scorer(self, type_name: str, name: str, params: Mapping[str, Any]) -> Scorer:
        return _make(self._scorers, "scorer", type_name, name, params)

    def make_picker(self, type_name: str, name: str, params: Mapping[str, Any]) -> Picker:
        return _make(self._pickers, "picker", type_name, name, params)


def _add(
    table: dict[str, _Entry[_P]],
    type_name: str,
    plugin: Callable[..., _P],
    deps: Sequence[object],
) -> None:
    if type_name in table:
        raise PluginError(f"plugin type {type_name!r} is already registered")
    try:
        schema = ParamSchema(getattr(plugin, "Params", None))
    except TypeError as exc:  # a broken declaration is the plugin author's bug: fail at start
        raise TypeError(f"plugin type {type_name!r}: {exc}") from exc
    table[type_name] = _Entry(plugin, tuple(deps), schema)


def _make(
    table: Mapping[str, _Entry[_P]],
    kind: str,
    type_name: str,
    name: str,
    params: Mapping[str, Any],
) -> _P:
    try:
        entry = table[type_name]
    except KeyError:
        known = ", ".join(sorted(table)) or "none"
        raise PluginError(f"unknown {kind} type {type_name!r} (known: {known})") from None
    try:
        if not isinstance(name, str) or not name:
            raise ValueError(f"plugin name must be a non-empty string, got {name!r}")
        parsed = entry.schema.parse(params)
        if parsed is None:
            return entry.build(name, *entry.deps)
        return entry.build(name, *entry.deps, params=parsed)
    except (TypeError, ValueError) as exc:
        raise PluginError(f"{kind} {type_name!r}: {exc}") from exc
