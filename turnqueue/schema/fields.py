"""``@field``, ``@mutation`` and ``@subscription`` with a description, typed for strict mypy.

Strawberry types the keyword-only form ``strawberry.field(description=…)`` as ``Any``, which
strict mypy refuses as a decorator (``untyped-decorator``). These call the same functions with
``resolver=`` (what the decorator form does) and keep the decorated function's type for mypy.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar, cast

import strawberry

F = TypeVar("F", bound=Callable[..., Any])


def field(description: str, *, deprecation_reason: str | None = None) -> Callable[[F], F]:
    def decorate(resolver: F) -> F:
        made = strawberry.field(
            resolver=resolver, description=description, deprecation_reason=deprecation_reason
        )
        return cast(F, made)

    return decorate


def mutation(description: str) -> Callable[[F], F]:
    def decorate(resolver: F) -> F:
        return cast(F, strawberry.mutation(resolver=resolver, description=description))

    return decorate


def subscription(description: str) -> Callable[[F], F]:
    def decorate(resolver: F) -> F:
        return cast(F, strawberry.subscription(resolver=resolver, description=description))

    return decorate
