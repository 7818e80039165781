from __future__ import annotations

import dataclasses
import enum
import math
from dataclasses import dataclass, field
from typing import Annotated, Literal

import pytest

from routing.params import Bounds, ParamSchema, ParamSpec


class Mode(enum.Enum):
    FAST = "fast"
    SAFE = "safe"


@dataclass(frozen=True, slots=True)
class Params:
    ratio: Annotated[float, Bounds(ge=0.0, le=1.0)] = 0.5
    rate: Annotated[float, Bounds(gt=0.0)] = 2.0
    count: Annotated[int, Bounds(ge=1)] = 3
    enabled: bool = True
    label: str = "x"
    side: Literal["left", "right", 1] = "left"
    mode: Mode = Mode.FAST


@dataclass(frozen=True, slots=True)
class Needs:
    size: int
    tags: str = field(default_factory=lambda: "t")


SCHEMA = ParamSchema(Params)


def test_defaults_fill_absent_keys() -> None:
    assert SCHEMA.parse({}) == Params()
    assert SCHEMA.parse({"count": 7}) == Params(count=7)


def test_values_are_parsed_to_the_declared_types() -> None:
    parsed = SCHEMA.parse(
        {"ratio": 1, "rate": 0.25, "enabled": False, "label": "y", "side": 1, "mode": "safe"}
    )
    assert parsed == Params(ratio=1.0, rate=0.25, enabled=False, label="y", side=1, mode=Mode.SAFE)
    assert isinstance(parsed, Params) and type(parsed.ratio) is float


def test_unknown_keys_are_rejected_naming_the_accepted_ones() -> None:
    accepted = "count, enabled, label, mode, rate, ratio, side"
    with pytest.raises(
        ValueError, match=rf"unknown parameter\(s\) 'bogus', 'x' \(accepted: {accepted}\)"
    ):
        SCHEMA.parse({"x": 1, "bogus": 2, "rate": 1.0})
    with pytest.raises(ValueError, match=r"unknown parameter\(s\) 'x' \(accepted: none\)"):
        ParamSchema().parse({"x": 1})


def test_a_plugin_without_params_accepts_only_an_empty_mapping() -> None:
    assert ParamSchema().parse({}) is None
    assert ParamSchema().specs == ()


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"ratio": 1.5}, "parameter 'ratio' must be a finite number and >= 0 and <= 1, got 1.5"),
        ({"ratio": -0.1}, "parameter 'ratio' must be a finite number and >= 0 and <= 1, got -0.1"),
        ({"rate": 0}, "parameter 'rate' must be a finite number and > 0, got 0"),
        ({"count": 0}, "parameter 'count' must be an integer and >= 1, got 0"),
    ],
)
def test_bounds_are_enforced_and_named(raw: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=f"^{message}$"):
        SCHEMA.parse(raw)


def test_bounds_are_inclusive_or_exclusive_as_named() -> None:
    assert SCHEMA.parse({"ratio": 0, "rate": 1e-300, "count": 1}) == Params(0.0, 1e-300, 1)
    assert SCHEMA.parse({"ratio": 1}) == Params(ratio=1.0)


@pytest.mark.parametrize(
    "bad", [True, False, "0.5", None, [1], math.nan, math.inf, -math.inf, 10**400]
)
def test_a_float_is_a_real_finite_number_not_a_bool_nor_a_huge_int(bad: object) -> None:
    with pytest.raises(ValueError, match=r"^parameter 'rate' must be a finite number and > 0"):
        SCHEMA.parse({"rate": bad})


def test_huge_ints_are_shortened_in_the_message() -> None:
    with pytest.raises(ValueError, match=r"got 1000+\.\.\.0+$"):
        SCHEMA.parse({"rate": 10**400})


@pytest.mark.parametrize("bad", [True, 2.0, "2", None])
def test_an_int_is_an_int_not_a_float_or_bool(bad: object) -> None:
    with pytest.raises(ValueError, match=r"^parameter 'count' must be an integer and >= 1, got"):
        SCHEMA.parse({"count": bad})


def test_an_int_may_exceed_a_float_when_its_bounds_allow() -> None:
    assert SCHEMA.parse({"count": 10**400}) == Params(count=10**400)


@pytest.mark.parametrize(
    ("key", "bad", "expected"),
    [
        ("enabled", 1, "true or false"),
        ("enabled", "yes", "true or false"),
        ("label", 3, "a string"),
        ("label", None, "a string"),
        ("side", "up", "one of 'left', 'right', 1"),
        ("side", 1.0, "one of 'left', 'right', 1"),
        ("side", True, "one of 'left', 'right', 1"),
        ("mode", "FAST", "one of 'fast', 'safe'"),
    ],
)
def test_other_types_name_what_they_expect(key: str, bad: object, expected: str) -> None:
    with pytest.raises(ValueError, match=f"^parameter '{key}' must be {expected}, got"):
        SCHEMA.parse({key: bad})


def test_fields_without_a_default_are_required() -> None:
    schema = ParamSchema(Needs)
    assert schema.parse({"size": 4}) == Needs(4, "t")
    with pytest.raises(ValueError, match=r"missing parameter 'size' \(an integer\)"):
        schema.parse({})


def test_params_must_be_a_mapping() -> None:
    with pytest.raises(ValueError, match="params must be a mapping, got list"):
        SCHEMA.parse(["rate"])  # type: ignore[arg-type]


def test_specs_describe_each_parameter() -> None:
    specs = {spec.name: spec for spec in SCHEMA.specs}
    assert list(specs) == [f.name for f in dataclasses.fields(Params)]
    assert specs["ratio"] == ParamSpec("ratio", float, 0.5, Bounds(ge=0.0, le=1.0))
    assert [str(spec) for spec in SCHEMA.specs] == [
        "ratio: float, >= 0 and <= 1, default 0.5",
        "rate: float, > 0, default 2.0",
        "count: int, >= 1, default 3",
        "enabled: bool, default True",
        "label: str, default 'x'",
        "side: 'left' | 'right' | 1, default 'left'",
        "mode: 'fast' | 'safe', default 'fast'",
    ]
    required = ParamSchema(Needs).specs[0]
    assert required.required and str(required) == "size: int, required"


def test_bounds_read_as_written() -> None:
    assert str(Bounds()) == ""
    assert str(Bounds(gt=0, lt=2.5)) == "> 0 and < 2.5"
    assert Bounds(gt=0, lt=1).admits(0.5)
    assert not Bounds(gt=0).admits(0) and not Bounds(lt=1).admits(1)


def test_broken_declarations_fail_at_once() -> None:
    @dataclass(frozen=True)
    class Listed:
        items: list[int] = field(default_factory=list)

    @dataclass(frozen=True)
    class BoundedText:
        text: Annotated[str, Bounds(ge=0)] = ""

    @dataclass(frozen=True)
    class BadDefault:
        rate: Annotated[float, Bounds(gt=0)] = 0.0

    class NotADataclass:
        rate: float = 1.0

    with pytest.raises(TypeError, match="parameter 'items': unsupported type"):
        ParamSchema(Listed)
    with pytest.raises(TypeError, match="'text': bounds apply to int and float"):
        ParamSchema(BoundedText)
    with pytest.raises(
        TypeError, match=r"invalid default: parameter 'rate' must be .* > 0, got 0.0"
    ):
        ParamSchema(BadDefault)
    with pytest.raises(TypeError, match="Params must be a dataclass"):
        ParamSchema(NotADataclass)
