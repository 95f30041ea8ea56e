"""``fast_init``: a frozen, slotted dataclass whose ``__init__`` costs what a mutable one's does.

A frozen dataclass writes each field with ``object.__setattr__``: several times the cost of the
rest of the construction, and the store builds these objects for every row it maps. The
``__init__`` made here calls each slot's member descriptor ``__set__`` (what
``object.__setattr__`` ends in), bound once at decoration.

Same contract as the dataclass's own ``__init__`` (parameters, order, defaults, keyword-only
fields, stored values); the instance stays frozen, equal and hashable. A class this cannot copy
exactly (``__post_init__``, ``InitVar``, ``init=False`` or ``default_factory`` fields, no slots,
a base class) is refused at import. The generated code names nothing a field could shadow.

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
    slots = cls.__dict__.get("__slots__")
    if slots is None or hasattr(cls, "__post_init__") or cls.__bases__ != (object,):
        raise TypeError(f"{cls.__name__}: fast_init needs slots=True, no base, no __post_init__")
    own = fields(cls)
    if (
        len(own) != len(cls.__dataclass_fields__)
        or tuple(slots) != tuple(f.name for f in own)
        or any(not f.init or f.default_factory is not MISSING for f in own)
        or any(f.name.startswith("_fi_") or f.name == "self" for f in own)
    ):
        raise TypeError(f"{cls.__name__}: fast_init takes plain init fields only")
    original = cls.__init__
    setters = [cls.__dict__[f.name].__set__ for f in own]
    defaults = [f.default for f in own]
    positional = [_param(i, f.name, f.default) for i, f in enumerate(own) if not f.kw_only]
    keyword = [_param(i, f.name, f.default) for i, f in enumerate(own) if f.kw_only]
    params = ", ".join(["self", *positional, *(["*", *keyword] if keyword else [])])
    body = "".join(f"        _fi_set{i}(self, {f.name})\n" for i, f in enumerate(own))
    body = body or "        pass\n"
    source = (
        "def make(_fi_setters, _fi_defaults):\n"
        + "".join(f"    _fi_set{i} = _fi_setters[{i}]\n" for i in range(len(own)))
        + "".join(f"    _fi_default{i} = _fi_defaults[{i}]\n" for i in range(len(own)))
        + f"    def __init__({params}) -> None:\n{body}"
        + "    return __init__\n"
    )
    namespace: dict[str, Any] = {}
    exec(source, {}, namespace)  # generated from the field names, as dataclasses does
    init = namespace["make"](setters, defaults)
    init.__qualname__ = original.__qualname__
    init.__module__ = original.__module__
    init.__annotations__ = dict(original.__annotations__)
    init.__doc__ = original.__doc__
    cls.__init__ = init  # type: ignore[method-assign]
    return cls


def _param(i: int, name: str, default: object) -> str:
    return name if default is MISSING else f"{name}=_fi_default{i}"
