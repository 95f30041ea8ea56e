"""Query roots (SPEC §7). A session or task of another principal reads as null (S2)."""

from __future__ import annotations

from typing import Annotated

import strawberry

from turnqueue.resolvers import connections
from turnqueue.resolvers.context import Context
from turnqueue.schema import fields as described
from turnqueue.schema.connections import Connection, page_count
from turnqueue.schema.items import AgentProfile
from turnqueue.schema.reads import paged
from turnqueue.schema.sessions import Session, Task

Info = strawberry.Info[Context, None]
Id = Annotated[strawberry.ID, strawberry.argument(description="Its id.")]


@strawberry.type(description="Reads. Everything a principal reads is its own (S2).")
class Query:
    @described.field(
        "One of the caller's sessions; null when there is none with this id, when "
        "it belongs to another principal (S2), or when the id is malformed."
    )
    async def session(self, info: Info, id: Id) -> Session | None:
        ctx = info.context
        session = await ctx.engine.session(ctx.require_principal(), id)
        return Session.from_domain(session) if session is not None else None

    @described.field(
        "One of the caller's tasks; null when there is none with this id, when it "
        "belongs to another principal (S2), or when the id is malformed."
    )
    async def task(self, info: Info, id: Id) -> Task | None:
        ctx = info.context
        task = await ctx.engine.task(ctx.require_principal(), id)
        return Task.from_domain(task) if task is not None else None

    @described.field(
        "The caller's newest tasks, newest first, in one unpaged list.",
        deprecation_reason="Use `tasksConnection`, which pages with cursors.",
    )
    async def tasks(
        self,
        info: Info,
        first: Annotated[
            int,
            strawberry.argument(
                description="How many: at most 200 (a larger value answers 200); a negative one "
                "is an error with `extensions.code` INVALID_INPUT."
            ),
        ] = 50,
    ) -> list[Task]:
        ctx = info.context
        first = page_count("first", first)  # capped (SPEC §7), never negative (S3)
        tasks = await ctx.engine.tasks(ctx.require_principal(), first)
        return [Task.from_domain(t) for t in tasks]

    tasks_connection: Connection[Task] = paged(
        "The caller's tasks, newest first (by creation time, then id), a page at a "
        "time (G3). A task created while you page lands before the first page, so paging on "
        "with `after` sees every older task once. Bad paging arguments are an error with "
        "`extensions.code` INVALID_INPUT.",
        lambda ctx, _, args: connections.tasks(ctx.engine.reads, ctx.require_principal(), args),
    )

    @described.field("The agent profiles a task can run with (A1): names and types only.")
    def agents(self, info: Info) -> list[AgentProfile]:
        info.context.require_principal()
        return [AgentProfile.from_domain(p) for p in info.context.engine.agents()]
