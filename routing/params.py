"""Typed plugin parameters: a plugin declares them once; the registry checks config against them.

A plugin that takes parameters declares a frozen dataclass `Params`: one field per parameter,
with its type, its default and, for a number, its bounds in `Annotated`:

    @dataclass(frozen=True, slots=True)
    class Params:
        temperature: Annotated[float, Bounds(gt=0.0)] = 0.1

`ParamSchema(Params).parse(raw)` turns a parsed YAML mapping into a `Params`, or raises
ValueError naming the parameter and what it must be; an unknown key is rejected, listing the
accepted ones. A `float` is a finite real within its bounds (an int is converted; a bool is not
a number; an int too large for a float is rejected); an `int` an int within its bounds; a
`bool` true or false; a `str` a string; a `Literal[...]` or `Enum` one of its values. A field
without a default is required. `ParamSchema.specs` describes each parameter for docs.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import reprlib
from collections.abc import Callable, Mapping
from typing import Annotated, Any, Literal, get_args, get_origin, get_type_hints

_INVALID = object()


@dataclasses.dataclass(frozen=True, slots=True)
class Bounds:
    """Limits of a numeric parameter: value > gt, >= ge, < lt, <= le (None: no limit)."""

    gt: float | None = None
    ge: float | None = None
    lt: float | None = None
    le: float | None = None

    def admits(self, value: float) -> bool:
        return (
            (self.gt is None or value > self.gt)
            and (self.ge is None or value >= self.ge)
            and (self.lt is None or value < self.lt)
            and (self.le is None or value <= self.le)
        )

    def __str__(self) -> str:
        limits = ((">", self.gt), (">=", self.ge), ("<", self.lt), ("<=", self.le))
        return " and ".join(f"{op} {b:g}" for op, b in limits if b is not None)


@dataclasses.dataclass(frozen=True, slots=True)
class ParamSpec:
    """One declared parameter: name, value type, default (`dataclasses.MISSING`: required) and
    bounds. The type is bool, int, float, str, a `Literal[...]` or an `Enum` subclass."""

    name: str
    type: Any
    default: object = dataclasses.MISSING
    bounds: Bounds = Bounds()

    @property
    def required(self) -> bool:
        return self.default is dataclasses.MISSING

    @property
    def choices(self) -> tuple[object, ...]:
        """The allowed values of a `Literal` or `Enum` parameter; () for the other types."""
        if get_origin(self.type) is Literal:
            return get_args(self.type)
        if _is_enum(self.type):
            return tuple(member.value for member in self.type)
        return ()

    @property
    def type_name(self) -> str:
        """`float`, `int`, `bool`, `str`, or the choices as `'a' | 'b'`."""
        choices = self.choices
        return " | ".join(map(repr, choices)) if choices else str(self.type.__name__)

    @property
    def expected(self) -> str:
        """What a value must be, in words: `a finite number and > 0`."""
        base = {float: "a finite number", int: "an integer", bool: "true or false", str: "a string"}
        what = base.get(self.type) or "one of " + ", ".join(map(repr, self.choices))
        bounds = str(self.bounds)
        return f"{what} and {bounds}" if bounds else what

    def parse(self, value: object) -> object:
        """`value` as this parameter's type; ValueError naming the parameter otherwise."""
        parsed = _convert(self, value)
        if parsed is _INVALID:
            got = reprlib.repr(value)  # a 400-digit int or a long string, shortened
            raise ValueError(f"parameter {self.name!r} must be {self.expected}, got {got}")
        return parsed

    def __str__(self) -> str:
        default = self.default.value if isinstance(self.default, enum.Enum) else self.default
        parts = [self.type_name, str(self.bounds)]
        parts.append("required" if self.required else f"default {default!r}")
        return f"{self.name}: {', '.join(p for p in parts if p)}"


class ParamSchema:
    """The parameters one plugin type declares (its `Params` dataclass, or none), and the check
    of a config mapping against them."""

    def __init__(self, params_cls: Callable[..., object] | None = None) -> None:
        """TypeError if `params_cls` is not a dataclass of supported, validly defaulted fields."""
        self._cls = params_cls
        self.specs: tuple[ParamSpec, ...] = () if params_cls is None else _specs(params_cls)

    def parse(self, raw: Mapping[str, object]) -> object | None:
        """A `Params` built from `raw`, or None for a plugin that declares no parameters."""
        if not isinstance(raw, Mapping):
            raise ValueError(f"params must be a mapping, got {type(raw).__name__}")
        accepted = {spec.name: spec for spec in self.specs}
        unknown = sorted(repr(key) for key in raw if key not in accepted)
        if unknown:
            allowed = ", ".join(sorted(accepted)) or "none"
            raise ValueError(f"unknown parameter(s) {', '.join(unknown)} (accepted: {allowed})")
        if self._cls is None:
            return None
        values = {}
        for spec in self.specs:
            if spec.name in raw:
                values[spec.name] = spec.parse(raw[spec.name])
            elif spec.required:
                raise ValueError(f"missing parameter {spec.name!r} ({spec.expected})")
        return self._cls(**values)


def _specs(params_cls: Callable[..., object]) -> tuple[ParamSpec, ...]:
    if not (isinstance(params_cls, type) and dataclasses.is_dataclass(params_cls)):
        raise TypeError(f"Params must be a dataclass, got {params_cls!r}")
    hints = get_type_hints(params_cls, include_extras=True)
    specs = []
    for field in dataclasses.fields(params_cls):
        default = field.default
        if field.default_factory is not dataclasses.MISSING:
            default = field.default_factory()
        specs.append(_spec(field.name, hints[field.name], default))
    return tuple(specs)


def _spec(name: str, hint: Any, default: object) -> ParamSpec:
    bounds = Bounds()
    if get_origin(hint) is Annotated:
        hint, *extras = get_args(hint)
        bounds = next((e for e in extras if isinstance(e, Bounds)), bounds)
    if not (hint in (bool, int, float, str) or get_origin(hint) is Literal or _is_enum(hint)):
        raise TypeError(f"parameter {name!r}: unsupported type {hint!r}")
    if bounds != Bounds() and hint not in (int, float):
        raise TypeError(f"parameter {name!r}: bounds apply to int and float parameters only")
    spec = ParamSpec(name, hint, default, bounds)
    if not spec.required:
        try:
            spec.parse(default)
        except ValueError as exc:
            raise TypeError(f"invalid default: {exc}") from None
    return spec


def _is_enum(hint: Any) -> bool:
    return isinstance(hint, type) and issubclass(hint, enum.Enum)


def _convert(spec: ParamSpec, value: object) -> object:
    """`value` as `spec`'s type, or _INVALID."""
    kind = spec.type
    if kind is bool or isinstance(value, bool):  # bool is an int, but neither a number nor text
        return value if kind is bool and isinstance(value, bool) else _INVALID
    if kind is float:
        if not isinstance(value, int | float):
            return _INVALID
        try:
            number = float(value)
        except OverflowError:  # an int too large for a float
            return _INVALID
        return number if math.isfinite(number) and spec.bounds.admits(number) else _INVALID
    if kind is int:
        if isinstance(value, int) and spec.bounds.admits(value):
            return int(value)
        return _INVALID
    if kind is str:
        return str(value) if isinstance(value, str) else _INVALID
    if _is_enum(kind) and isinstance(value, kind):
        return value
    for choice in spec.choices:  # exact type: 1 is not 1.0 or '1'
        if type(choice) is type(value) and choice == value:
            return kind(choice) if _is_enum(kind) else choice
    return _INVALID
