"""``turnqueue.fastinit``: a frozen slotted dataclass built as its own ``__init__`` would."""

from __future__ import annotations

import copy
import dataclasses
import inspect
import pickle
from dataclasses import dataclass, field

import pytest

from turnqueue import domain
from turnqueue.fastinit import fast_init
from turnqueue.store.protocol import SessionView


@fast_init
@dataclass(frozen=True, slots=True)
class Point:
    x: int
    y: int = 0
    label: str = field(default="", compare=False)
    z: int = field(default=9, kw_only=True)


def test_it_takes_the_same_arguments_and_stores_the_same_values() -> None:
    p = Point(1, 2, "p", z=3)
    assert (p.x, p.y, p.label, p.z) == (1, 2, "p", 3)
    assert Point(1) == Point(x=1, y=0, z=9) and Point(1).label == "" and Point(1).z == 9
    assert Point(1, label="a") == Point(1, label="b")  # compare=False kept
    assert hash(Point(1, 2)) == hash(Point(1, 2))
    assert repr(Point(1)) == "Point(x=1, y=0, label='', z=9)"


def test_its_signature_and_errors_are_the_dataclasses() -> None:
    undecorated = dataclass(frozen=True, slots=True)(
        type("Point", (), {"__annotations__": {"x": "int", "y": "int"}, "y": 0})
    )
    assert (
        str(inspect.signature(Point))
        == "(x: 'int', y: 'int' = 0, label: 'str' = '', *, z: 'int' = 9) -> None"
    )
    assert Point.__init__.__qualname__ == "Point.__init__"
    with pytest.raises(TypeError, match=r"Point.__init__\(\) missing 1 required positional"):
        Point()  # type: ignore[call-arg]
    with pytest.raises(TypeError, match=r"Point.__init__\(\) missing 1 required positional"):
        undecorated()
    with pytest.raises(TypeError, match="takes from 2 to 4 positional arguments"):
        Point(1, 2, "", 4)  # type: ignore[misc]
    with pytest.raises(TypeError, match="unexpected keyword argument 'w'"):
        Point(1, w=2)  # type: ignore[call-arg]


def test_it_stays_frozen_and_copies_pickles_and_replaces() -> None:
    p = Point(1, 2)
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.x = 5  # type: ignore[misc]
    assert copy.copy(p) == p and copy.deepcopy(p) == p and pickle.loads(pickle.dumps(p)) == p
    assert dataclasses.replace(p, y=7) == Point(1, 7)


@fast_init
@dataclass(frozen=True, slots=True)
class Shadowing:
    """Fields named like the builtins the generated code could use."""

    type: str
    object: int = 0
    setattr: int = 1


def test_fields_may_be_named_like_builtins() -> None:
    value = Shadowing("t", 2)
    assert (value.type, value.object, value.setattr) == ("t", 2, 1)
    assert type(value) is Shadowing


class Tagged(Point):
    """A subclass with a slot of its own: built through the slots' descriptors."""

    __slots__ = ("tag",)


def test_an_instance_is_of_its_class_and_a_subclass_is_built_too() -> None:
    assert type(Point(1)) is Point and isinstance(Point(1), Point)
    tagged = Tagged(1, 2, z=3)
    assert type(tagged) is Tagged and (tagged.x, tagged.y, tagged.label, tagged.z) == (1, 2, "", 3)
    with pytest.raises(dataclasses.FrozenInstanceError):
        tagged.x = 2  # type: ignore[misc]


def test_it_refuses_what_it_cannot_copy_exactly() -> None:
    with pytest.raises(TypeError):
        fast_init(dataclass(frozen=True)(type("NoSlots", (), {"__annotations__": {"a": "int"}})))
    with pytest.raises(TypeError):
        fast_init(dataclass(slots=True)(type("Mutable", (), {"__annotations__": {"a": "int"}})))
    factory = type(
        "Factory", (), {"__annotations__": {"a": "list[int]"}, "a": field(default_factory=list)}
    )
    with pytest.raises(TypeError):
        fast_init(dataclass(frozen=True, slots=True)(factory))
    hidden = type(
        "Hidden", (), {"__annotations__": {"a": "int"}, "a": field(default=1, init=False)}
    )
    with pytest.raises(TypeError):
        fast_init(dataclass(frozen=True, slots=True)(hidden))
    post = type("Post", (), {"__annotations__": {"a": "int"}, "__post_init__": lambda self: None})
    with pytest.raises(TypeError):
        fast_init(dataclass(frozen=True, slots=True)(post))


def test_every_frozen_domain_class_is_built_by_fast_init_with_its_dataclass_signature() -> None:
    """The domain's value objects (and the store's view) carry ``fast_init``; each one's
    ``__init__`` takes what the plain dataclass's would."""
    classes = [
        value
        for value in [*vars(domain).values(), SessionView]
        if isinstance(value, type)
        and dataclasses.is_dataclass(value)
        and value.__dataclass_params__.frozen  # type: ignore[attr-defined]
        and value.__module__.startswith(("turnqueue.domain", "turnqueue.store.protocol"))
    ]
    assert len(classes) > 20
    for cls in classes:
        init = cls.__init__
        assert init.__code__.co_filename == "<string>" and init.__qualname__.startswith(
            cls.__name__
        ), cls
        plain = dataclasses.make_dataclass(
            cls.__name__,
            [
                (f.name, f.type, field(default=f.default, kw_only=f.kw_only))
                for f in dataclasses.fields(cls)
            ],
            frozen=True,
            slots=True,
        )
        assert inspect.signature(plain) == inspect.signature(cls), cls
