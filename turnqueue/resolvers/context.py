"""The per-request context: who is calling, the engine, and per-operation cached reads.

Hazard: Strawberry calls ``get_context`` once per WebSocket, not once per operation, and every
subscription event runs its selection with that same object. DataLoaders therefore do not live on
the context itself: they live in a ``ContextVar``, renewed at the start of every operation (the
:class:`FreshReads` extension, which runs in the operation's own task) and by subscriptions before
each event they yield. Concurrent operations on one socket each see their own loaders, and no
event is served from a cache filled by an earlier one.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, TypeVar

from starlette.requests import Request
from starlette.responses import Response
from starlette.websockets import WebSocket
from strawberry.dataloader import DataLoader
from strawberry.extensions import SchemaExtension

from turnqueue import domain
from turnqueue.engine import Engine
from turnqueue.resolvers import connections
from turnqueue.schema.connections import Connection, PageArgs
from turnqueue.schema.items import TurnItem
from turnqueue.schema.sessions import Session
from turnqueue.schema.turns import Turn

K = TypeVar("K")
V = TypeVar("V")


class SharedLoader(DataLoader[K, V]):
    """Hazard: a DataLoader answers every reader of a key with one future, and graphql-core 3.3
    cancels the siblings of a field whose error reaches their parent. Each load is shielded, so
    that cancels one field's wait, not the shared future
    (docs/upstream/graphql-core-gather-cancels-dataloader.md)."""

    def load(self, key: K) -> Awaitable[V]:
        return asyncio.shield(super().load(key))


class Loaders:
    """One operation's DataLoaders, each created on first use (``cached_property``: synchronously,
    so concurrent resolvers of one operation still share one)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    @cached_property
    def task(self) -> DataLoader[str, domain.Task | None]:
        return _found(self.engine.reads.tasks)

    @cached_property
    def session(self) -> DataLoader[str, domain.Session | None]:
        return _found(self.engine.reads.sessions)

    @cached_property
    def sessions_of_task(self) -> DataLoader[str, list[domain.Session]]:
        return SharedLoader(load_fn=self._sessions_of_tasks)

    @cached_property
    def queue_status(self) -> DataLoader[str, domain.QueueStatus]:
        return _each(self.engine.queue_status)

    @cached_property
    def turn(self) -> DataLoader[str, domain.Turn | None]:
        return _each(self.engine.turn)

    @cached_property
    def approval(self) -> DataLoader[str, domain.Approval | None]:
        return _each(self.engine.approval)

    @cached_property
    def turns(self) -> DataLoader[tuple[str, int], list[domain.Turn]]:
        return _each(lambda key: self.engine.turns_of(*key))

    @cached_property
    def cancellation(self) -> DataLoader[str, domain.CancellationStatus]:
        # Read once per operation so pending and its revision agree across fields (C2).
        return _each(self.engine.cancellation)

    @cached_property
    def turn_items(self) -> DataLoader[str, tuple[domain.TurnItem, ...]]:
        # A3: folded from the output log, once per turn per operation (items and its pages).
        return _each(self.engine.turn_items)

    async def _sessions_of_tasks(self, ids: list[str]) -> list[list[domain.Session]]:
        found = await self.engine.reads.sessions_of_tasks(ids)
        return [found.get(i, []) for i in ids]


def _found(read: Callable[[list[K]], Awaitable[Mapping[K, V]]]) -> DataLoader[K, V | None]:
    """A loader over a batch read, which answers the rows it found by key."""

    async def load(keys: list[K]) -> list[V | None]:
        found = await read(keys)
        return [found.get(k) for k in keys]

    return SharedLoader(load_fn=load)


def _each(read: Callable[[K], Awaitable[V]]) -> DataLoader[K, V]:
    """A loader for reads the store has no batch of: one concurrent read per distinct key."""

    async def load(keys: list[K]) -> list[V]:
        return list(await asyncio.gather(*(read(k) for k in keys)))

    return SharedLoader(load_fn=load)


#: ``FanOut.share``: (context, query, variables, operation name) -> the operation's results, or
#: None when it is not shared
Share = Callable[["Context", str, dict[str, Any] | None, str | None], AsyncIterator[Any] | None]


_LOADERS: ContextVar[Loaders | None] = ContextVar("turnqueue_loaders", default=None)


@dataclass(eq=False)
class Context:
    """The context of one HTTP request or one WebSocket connection (implements ``Reads``)."""

    engine: Engine
    principal: str | None
    #: None for the shared executions of turnqueue.api.fanout, which belong to no connection
    request: Request | WebSocket | None = None
    response: Response | WebSocket | None = None
    #: set by Strawberry from the ``connection_init`` payload (WebSocket only)
    connection_params: dict[str, object] | None = field(default=None)
    #: the SSE ``id`` of the event a subscription is about to yield (O3; see turnqueue.api.view)
    event_id: str | None = None
    #: an HTTP request that asks for no stream (no graphql-sse ``Accept``): it cannot run a
    #: subscription (S3; ``turnqueue.api.SubscriptionsNeedAStream``)
    plain_http: bool = False
    #: a WebSocket's: the app's fan-out, which serves a snapshot subscription from the one
    #: execution its identical subscriptions share, or answers None (``TurnqueueSchema.stream``,
    #: turnqueue.api.fanout)
    share: Share | None = None

    def require_principal(self) -> str:
        if self.principal is None:  # unreachable: the transport refuses such requests
            raise PermissionError("unauthenticated request reached a resolver")
        return self.principal

    @property
    def loaders(self) -> Loaders:
        loaders = _LOADERS.get()
        if loaders is None or loaders.engine is not self.engine:
            loaders = self.renew_loaders()
        return loaders

    def renew_loaders(self) -> Loaders:
        """Start a fresh cache (each operation, and each subscription event)."""
        loaders = Loaders(self.engine)
        _LOADERS.set(loaders)
        return loaders

    # -- Reads (the interface the schema types use) ---------------------------------------------
    async def task(self, task_id: str) -> domain.Task | None:
        return await self.loaders.task.load(task_id)

    async def session(self, session_id: str) -> domain.Session | None:
        return await self.loaders.session.load(session_id)

    async def sessions_of_task(self, task_id: str) -> list[domain.Session]:
        return await self.loaders.sessions_of_task.load(task_id)

    async def queue_status(self, session_id: str) -> domain.QueueStatus:
        return await self.loaders.queue_status.load(session_id)

    async def cancellation(self, session_id: str) -> domain.CancellationStatus:
        return await self.loaders.cancellation.load(session_id)

    async def turn(self, turn_id: str) -> domain.Turn | None:
        return await self.loaders.turn.load(turn_id)

    async def approval(self, approval_id: str) -> domain.Approval | None:
        return await self.loaders.approval.load(approval_id)

    async def turns(self, session_id: str, last: int) -> list[domain.Turn]:
        return await self.loaders.turns.load((session_id, last))

    async def turn_items(self, turn_id: str) -> tuple[domain.TurnItem, ...]:
        return await self.loaders.turn_items.load(turn_id)

    def agent_error(self, session_id: str) -> str | None:
        return self.engine.agent_error(session_id)

    def agent_stderr(self, session_id: str) -> str | None:
        return self.engine.agent_stderr(session_id)

    async def agent_conversation(self, session_id: str) -> domain.AgentConversation | None:
        return await self.engine.agent_conversation(session_id)

    async def approvals_of_turn(self, turn_id: str) -> list[domain.Approval]:
        return await self.engine.approvals_of_turn(turn_id)

    # Pages are read as asked (no loader): a page is one keyset query of its own.
    async def sessions_connection(self, task_id: str, args: PageArgs) -> Connection[Session]:
        return await connections.sessions(self.engine.reads, task_id, args)

    async def turns_connection(self, session_id: str, args: PageArgs) -> Connection[Turn]:
        return await connections.turns(self.engine.reads, session_id, args)

    async def items_connection(self, turn_id: str, args: PageArgs) -> Connection[TurnItem]:
        return connections.items(await self.turn_items(turn_id), args)


class FreshReads(SchemaExtension):
    """Give every operation its own loaders, in the task that executes it."""

    def on_execute(self) -> Iterator[None]:
        context = self.execution_context.context
        if isinstance(context, Context):
            context.renew_loaders()
        yield
