"""What schema types need from the per-operation context, and the arguments they share.

Session fields beyond its own row (task, queue, cancellation, turns) resolve lazily
through the per-operation readers of the context (DataLoaders), so a client asking for
``tasks → sessions → queue / turns`` costs one batched read per level, not one per row. Types know
the context only through the :class:`Reads` protocol below.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated, Any, Protocol

import strawberry

from turnqueue import domain
from turnqueue.schema.connections import AFTER, BEFORE, FIRST, LAST, Connection, PageArgs


class Reads(Protocol):
    """What types need from the per-operation context: cached, batched reads."""

    async def task(self, task_id: str) -> domain.Task | None: ...

    async def session(self, session_id: str) -> domain.Session | None: ...

    async def sessions_of_task(self, task_id: str) -> list[domain.Session]: ...

    async def queue_status(self, session_id: str) -> domain.QueueStatus: ...

    async def cancellation(self, session_id: str) -> domain.CancellationStatus: ...

    async def turn(self, turn_id: str) -> domain.Turn | None: ...

    async def approval(self, approval_id: str) -> domain.Approval | None: ...

    async def turn_items(self, turn_id: str) -> tuple[domain.TurnItem, ...]: ...

    def agent_error(self, session_id: str) -> str | None: ...

    def agent_stderr(self, session_id: str) -> str | None: ...

    async def agent_conversation(self, session_id: str) -> domain.AgentConversation | None: ...

    async def approvals_of_turn(self, turn_id: str) -> list[domain.Approval]: ...

    async def turns(self, session_id: str, last: int) -> list[domain.Turn]: ...

    # The three connections are of Session, Turn and TurnItem: typed ``Any`` here because those
    # types import this module (naming them would be an import cycle, tests/test_imports.py);
    # each field that returns one states its precise type.
    async def sessions_connection(self, task_id: str, args: PageArgs) -> Connection[Any]: ...

    async def turns_connection(self, session_id: str, args: PageArgs) -> Connection[Any]: ...

    async def items_connection(self, turn_id: str, args: PageArgs) -> Connection[Any]: ...


Info = strawberry.Info[Reads, None]


def paged(description: str, read: Callable[[Any, Any, PageArgs], Awaitable[Any]]) -> Any:
    """A connection field (G3), annotated ``Connection[Node]`` where it is declared: the four
    paging arguments, and ``read(context, parent, args)`` for the page."""

    async def resolve(
        root: Any,
        info: Info,
        first: Annotated[int | None, strawberry.argument(description=FIRST)] = None,
        after: Annotated[str | None, strawberry.argument(description=AFTER)] = None,
        last: Annotated[int | None, strawberry.argument(description=LAST)] = None,
        before: Annotated[str | None, strawberry.argument(description=BEFORE)] = None,
    ) -> Any:
        return await read(info.context, root, PageArgs(first, after, last, before))

    return strawberry.field(resolver=resolve, description=description)
