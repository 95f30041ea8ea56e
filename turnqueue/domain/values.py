"""What every value object of the domain shares: the decorator that makes one (frozen, slotted,
built by :func:`~turnqueue.fastinit.fast_init`), ids, timestamps and the bound of a page."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TypeVar, dataclass_transform

from turnqueue.fastinit import fast_init

_T = TypeVar("_T")


@dataclass_transform(frozen_default=True, field_specifiers=(field,))
def value(cls: type[_T]) -> type[_T]:
    """A frozen, slotted dataclass, built by :func:`~turnqueue.fastinit.fast_init`."""
    return fast_init(dataclass(frozen=True, slots=True)(cls))


def new_id() -> str:
    return str(uuid.uuid4())


def is_valid_id(value: str) -> bool:
    try:
        return str(uuid.UUID(value)) == value.lower()
    except (ValueError, AttributeError, TypeError):
        return False


def utcnow() -> datetime:
    return datetime.now(UTC)


#: The most items one page or list answers, whatever was asked (SPEC §7: ``tasks(first:)``,
#: ``turns(last:)`` and every connection). The store caps its reads at it too.
MAX_PAGE = 200


def clamp_page(count: int) -> int:
    """At most :data:`MAX_PAGE`; a negative count is refused where it arrives (a bug here)."""
    if count < 0:
        raise ValueError(f"a page of {count} items")
    return min(count, MAX_PAGE)
