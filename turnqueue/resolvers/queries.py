"""Query roots (SPEC §7). A session or task of another principal reads as null (S2)."""

from __future__ import annotations

import strawberry

from turnqueue.resolvers.context import Context
from turnqueue.schema.types import MAX_PAGE, Session, Task

Info = strawberry.Info[Context, None]


@strawberry.type
class Query:
    @strawberry.field
    async def session(self, info: Info, id: strawberry.ID) -> Session | None:
        ctx = info.context
        session = await ctx.engine.session(ctx.require_principal(), id)
        return Session.from_domain(session) if session is not None else None

    @strawberry.field
    async def task(self, info: Info, id: strawberry.ID) -> Task | None:
        ctx = info.context
        task = await ctx.engine.task(ctx.require_principal(), id)
        return Task.from_domain(task) if task is not None else None

    @strawberry.field  # The caller's newest tasks (at most 200).
    async def tasks(self, info: Info, first: int = 50) -> list[Task]:
        ctx = info.context
        tasks = await ctx.engine.tasks(ctx.require_principal(), max(0, min(first, MAX_PAGE)))
        return [Task.from_domain(t) for t in tasks]
