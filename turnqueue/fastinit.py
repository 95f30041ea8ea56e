"""``fast_init``: a frozen, slotted dataclass whose ``__init__`` costs what a mutable one's does.

``@dataclass(frozen=True)`` writes each field with ``object.__setattr__(self, name, value)``:
a slot wrapper called through its argument tuples, a check against bypassing a C type's
``__setattr__``, then a lookup of the name. That is several times the cost of the rest of the
construction, and the store builds these objects for every row it maps (the session, policy and
view of each lock, each entry and turn). The ``__init__`` made here writes each slot through its
own member descriptor (``Class.__dict__[name].__set__``), which is what the lookup ends in anyway.

Same contract as the dataclass's own ``__init__``: the same parameters in the same order, the
same defaults, keyword-only fields after ``*``, the same values stored. The instance stays
frozen (``__setattr__`` still refuses), equal and hashable as before. Classes this cannot copy
exactly (``__post_init__``, ``InitVar``, ``init=False`` or ``default_factory`` fields, no
slots) are refused when the module defining them is imported.

Usage, above the dataclass decorator (type checkers read the dataclass as usual)::

    @fast_init
    @dataclass(frozen=True, slots=True)
    class Point:
        x: int
        y: int = 0
"""

from __future__ import annotations

from dataclasses import MISSING, fields, is_dataclass
from typing import Any, TypeVar

T = TypeVar("T", bound=type)


def fast_init(cls: T) -> T:
    if not is_dataclass(cls) or not cls.__dataclass_params__.frozen:  # type: ignore[attr-defined]
        raise TypeError(f"{cls.__name__}: fast_init is for frozen dataclasses")
    if "__slots__" not in cls.__dict__ or hasattr(cls, "__post_init__"):
        raise TypeError(f"{cls.__name__}: fast_init needs slots=True and no __post_init__")
    own = fields(cls)
    if len(own) != len(cls.__dataclass_fields__) or any(
        not f.init or f.default_factory is not MISSING for f in own
    ):
        raise TypeError(f"{cls.__name__}: fast_init takes plain init fields only")
    original = cls.__init__
    setters = [cls.__dict__[f.name].__set__ for f in own]
    defaults = [f.default for f in own]
    positional = [_param(i, f.name, f.default) for i, f in enumerate(own) if not f.kw_only]
    keyword = [_param(i, f.name, f.default) for i, f in enumerate(own) if f.kw_only]
    params = ", ".join(["self", *positional, *(["*", *keyword] if keyword else [])])
    body = "\n".join(f"        _set{i}(self, {f.name})" for i, f in enumerate(own)) or "pass"
    source = (
        "def make(setters, defaults):\n"
        + "".join(f"    _set{i} = setters[{i}]\n" for i in range(len(own)))
        + "".join(f"    _default{i} = defaults[{i}]\n" for i in range(len(own)))
        + f"    def __init__({params}) -> None:\n{body}\n"
        + "    return __init__\n"
    )
    namespace: dict[str, Any] = {}
    exec(source, {}, namespace)
    init = namespace["make"](setters, defaults)
    init.__qualname__ = original.__qualname__
    init.__module__ = original.__module__
    init.__annotations__ = dict(original.__annotations__)
    init.__doc__ = original.__doc__
    cls.__init__ = init  # type: ignore[method-assign]
    return cls


def _param(i: int, name: str, default: object) -> str:
    return name if default is MISSING else f"{name}=_default{i}"
