"""``@field`` (a mutation's too) and ``@subscription`` with a description, typed for strict mypy;
:func:`plain` for a data field, :func:`null` for a nullable one and :func:`copied` to build a type
from its domain value.

Strawberry types the keyword-only form ``strawberry.field(description=…)`` as ``Any``, which
strict mypy refuses as a decorator (``untyped-decorator``). These call the same functions with
``resolver=`` (what the decorator form does) and keep the decorated function's type for mypy.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, Self, TypeVar, cast

import strawberry

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

F = TypeVar("F", bound=Callable[..., Any])
S = TypeVar("S")
D = TypeVar("D")


def field(
    description: str, *, deprecation_reason: str | None = None, is_subscription: bool = False
) -> Callable[[F], F]:
    def decorate(resolver: F) -> F:
        made = strawberry.field(
            resolver=resolver,
            description=description,
            deprecation_reason=deprecation_reason,
            is_subscription=is_subscription,
        )
        return cast(F, made)

    return decorate


def subscription(description: str) -> Callable[[F], F]:
    return field(description, is_subscription=True)


def plain(description: str) -> Any:
    """A data field with ``description`` (a fresh field on each call)."""
    return strawberry.field(description=description)


def null(description: str) -> Any:
    """A nullable field with ``description``, null by default (a fresh field on each call)."""
    return strawberry.field(default=None, description=description)


#: Each type's fields set by its constructor (not those its resolvers answer).
_INITIALISED: dict[type, tuple[str, ...]] = {}


def copied(cls: type[S], value: object, **given: Any) -> S:
    """``cls`` with the fields ``given``, and each other field copied from ``value``'s attribute of
    the same name: builds a type from the domain value it shows."""
    names = _INITIALISED.get(cls)
    if names is None:
        fields = dataclasses.fields(cast("type[DataclassInstance]", cls))
        names = _INITIALISED[cls] = tuple(f.name for f in fields if f.init)
    copies = {name: getattr(value, name) for name in names if name not in given}
    return cls(**copies, **given)


class Copied(Generic[D]):
    """A type that shows a domain value ``D``: ``from_domain`` copies each of its fields from
    the value's attribute of the same name (:func:`copied`)."""

    @classmethod
    def from_domain(cls, value: D) -> Self:
        return copied(cls, value)
