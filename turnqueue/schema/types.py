"""Object types of the contract (SPEC §7), each built from its domain value with ``from_domain``.

The types live in modules by subject — :mod:`sessions` (Task, Session), :mod:`turns` (Turn and its
streamed output), :mod:`queue` (queue, cancellation, clarification), :mod:`reads` (what types need
from the context) — and are all importable from here, as before.
"""

from __future__ import annotations

import strawberry

from turnqueue.errors import UserFacingError
from turnqueue.schema.enums import ErrorCode
from turnqueue.schema.fields import copied
from turnqueue.schema.queue import CancellationStatus, Clarification, QueueEntry, QueueStatus
from turnqueue.schema.reads import After, Before, First, Info, Last, Reads
from turnqueue.schema.sessions import Session, Task
from turnqueue.schema.turns import Turn, TurnItemsChunk, TurnOutputChunk

__all__ = [
    "After",
    "Before",
    "CancellationStatus",
    "Clarification",
    "First",
    "Info",
    "Last",
    "QueueEntry",
    "QueueStatus",
    "Reads",
    "Session",
    "Task",
    "Turn",
    "TurnItemsChunk",
    "TurnOutputChunk",
    "UserError",
]


@strawberry.type(
    description="An expected refusal of a mutation: the mutation changed nothing and the "
    "entities of its payload are null."
)
class UserError:
    code: ErrorCode = strawberry.field(description="What was refused, for programs to act on.")
    message: str = strawberry.field(
        description="What was refused, in a sentence for people (its wording may change)."
    )
    field: list[str] | None = strawberry.field(
        default=None,
        description='The path of the input field at fault, e.g. `["entryId"]`; null when no '
        "single field is.",
    )

    @classmethod
    def from_domain(cls, error: UserFacingError) -> UserError:
        return copied(cls, error)
