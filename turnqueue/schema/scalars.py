"""The contract's custom scalars (SPEC §7, R1), registered through ``StrawberryConfig.scalar_map``.

``Revision`` is an integer below 2^53, sent as a JSON number so JavaScript clients compare it
exactly. ``DateTime`` is ISO 8601 in UTC. Parsers raise ``GraphQLError`` so the client gets a
clear message (not a masked one) for a bad variable or literal.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import NewType

import strawberry
from graphql import GraphQLError

from turnqueue.graphql_internals import ScalarDefinition

MAX_REVISION = 2**53 - 1

Revision = NewType("Revision", int)


def serialize_revision(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_REVISION:
        raise GraphQLError(f"Revision cannot represent {value!r}")
    return value


def parse_revision(value: object) -> Revision:
    if isinstance(value, bool) or not isinstance(value, int):
        raise GraphQLError(f"Revision must be an integer, not {value!r}")
    if not 0 <= value <= MAX_REVISION:
        raise GraphQLError(f"Revision must be between 0 and {MAX_REVISION}, not {value}")
    return Revision(value)


def serialize_datetime(value: object) -> str:
    if not isinstance(value, datetime):
        raise GraphQLError(f"DateTime cannot represent {value!r}")
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def parse_datetime(value: object) -> datetime:
    if not isinstance(value, str):
        raise GraphQLError(f"DateTime must be an ISO 8601 string, not {value!r}")
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise GraphQLError(f"DateTime must be ISO 8601, not {value!r}") from None
    if parsed.tzinfo is None:
        raise GraphQLError("DateTime must carry a time zone (UTC)")
    return parsed.astimezone(UTC)


REVISION: ScalarDefinition = strawberry.scalar(
    name="Revision",
    description="A revision: an integer below 2^53, sent as a JSON number. Larger is newer (R1).",
    serialize=serialize_revision,
    parse_value=parse_revision,
)

DATETIME: ScalarDefinition = strawberry.scalar(
    name="DateTime",
    description="A date and time in ISO 8601, in UTC.",
    serialize=serialize_datetime,
    parse_value=parse_datetime,
)

SCALAR_MAP: dict[object, ScalarDefinition] = {Revision: REVISION, datetime: DATETIME}
