"""`fast_init`: a cheaper `__init__` for the frozen, slotted dataclasses built on every request.

A frozen dataclass's generated `__init__` sets each field with `object.__setattr__(self,
name, value)`: a global and an attribute lookup, then a slot wrapper that slices its arguments
into a tuple and looks the name up on the type again, some 90 ns a field on Python 3.11
(a plain class's assignment is a tenth of that). The `__init__` made here sets each slot
through its member descriptor's `__set__`, looked up once: about half the cost. Everything
else stays the dataclass's: the fields, their defaults and default factories, `__eq__`,
`__hash__`, `__repr__`, `replace()`, and the instances are as frozen as before.
"""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar, cast

T = TypeVar("T")


class _Factory:
    """The default of a field with a default factory (shown as dataclasses shows it)."""

    def __repr__(self) -> str:
        return "<factory>"


_FACTORY = _Factory()


def fast_init(cls: type[T]) -> type[T]:
    """Give the frozen, slotted dataclass `cls` the `__init__` of the module docstring. Its
    fields must all be init fields, positional or keyword, without `__post_init__`."""
    params = getattr(cls, "__dataclass_params__", None)
    if params is None or not params.frozen or "__slots__" not in cls.__dict__:
        raise TypeError(f"{cls.__name__}: fast_init is for frozen, slotted dataclasses")
    if hasattr(cls, "__post_init__"):
        raise TypeError(f"{cls.__name__}: fast_init does not run __post_init__")
    names: dict[str, Any] = {"_FACTORY": _FACTORY}
    args, body = ["self"], []
    for f in dataclasses.fields(cast(Any, cls)):
        if not f.init or f.kw_only:
            raise TypeError(f"{cls.__name__}.{f.name}: fast_init takes init fields by position")
        names[f"_set_{f.name}"] = cls.__dict__[f.name].__set__  # the slot's member descriptor
        value = f.name
        if f.default is not dataclasses.MISSING:
            names[f"_dflt_{f.name}"] = f.default
            args.append(f"{f.name}=_dflt_{f.name}")
        elif f.default_factory is not dataclasses.MISSING:
            names[f"_factory_{f.name}"] = f.default_factory
            args.append(f"{f.name}=_FACTORY")
            value = f"_factory_{f.name}() if {f.name} is _FACTORY else {f.name}"
        else:
            args.append(f.name)
        body.append(f"    _set_{f.name}(self, {value})")
    source = f"def __init__({', '.join(args)}):\n" + ("\n".join(body) or "    pass") + "\n"
    exec(source, names)  # as dataclasses builds its own __init__
    init = names["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__module__ = cls.__module__
    init.__doc__ = cls.__init__.__doc__
    init.__annotations__ = dict(getattr(cls.__init__, "__annotations__", {}))
    setattr(cls, "__init__", init)  # noqa: B010 (a method assigned on the class)
    return cls
