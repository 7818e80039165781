from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import pytest

from routing.frozen import fast_init


@fast_init
@dataclass(frozen=True, slots=True)
class _Point:
    x: int
    y: int = 2
    tags: list[str] = field(default_factory=list)


def test_fields_defaults_and_factories_as_the_dataclass_sets_them() -> None:
    assert _Point(1) == _Point(1, 2, [])
    assert _Point(1, tags=["a"], y=5) == _Point(1, 5, ["a"])
    a, b = _Point(1), _Point(1)
    assert a.tags is not b.tags  # a fresh default per instance
    assert repr(_Point(3)) == "_Point(x=3, y=2, tags=[])"
    assert dataclasses.replace(_Point(1), y=9) == _Point(1, 9)


def test_instances_stay_frozen_and_calls_are_checked() -> None:
    p = _Point(1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.x = 3  # type: ignore[misc]
    with pytest.raises(TypeError):
        _Point()  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        _Point(1, z=3)  # type: ignore[call-arg]
    assert hash(_Point(1, 2, None)) == hash(_Point(1, 2, None))  # type: ignore[arg-type]


def test_refuses_what_it_cannot_build() -> None:
    @dataclass(slots=True)
    class Mutable:
        x: int

    @dataclass(frozen=True)
    class NoSlots:
        x: int

    @dataclass(frozen=True, slots=True)
    class Post:
        x: int

        def __post_init__(self) -> None:
            pass

    @dataclass(frozen=True, slots=True, kw_only=True)
    class KwOnly:
        x: int

    for cls in (Mutable, NoSlots, Post, KwOnly):
        with pytest.raises(TypeError):
            fast_init(cls)
