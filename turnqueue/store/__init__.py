"""Persistence: the store the engine sees, its SQL implementation and migrations. The only
place SQL lives.

The caller owns the transaction::

    async with store.transaction() as tx:
        view = await tx.lock(session_id)       # the session's lock row first (Q3)
        entry = await tx.reserve_head(session_id)
        ...
    # committed here; ``tx.after_commit`` callbacks have run

Store methods never commit by themselves. An exception inside the block rolls everything back and
no ``after_commit`` callback runs, which is how "events are published only after their transaction
commits" is kept: the engine registers its publications with ``tx.after_commit``.

Serialisation (Q3): every write of the policy and every reservation calls :meth:`Tx.lock` first. On
PostgreSQL that is ``SELECT … FOR UPDATE`` on ``queue_session_locks``; on SQLite every write
transaction is ``BEGIN IMMEDIATE`` behind one in-process writer lock, so the database has a single
writer and ``lock`` only reads.

Revisions (R1): methods that change a session's state, turns or clarification bump the session's
revision themselves. A queue gets one new revision per transaction that changed its status,
however many writes did (Q13): see :meth:`Tx.changed_queues` and :meth:`Tx.bump_queue`.

:class:`Tx` is the one transaction class (``turnqueue.store.tx``, an aggregate per mixin);
:class:`Store` is the protocol a store (or a test's wrapper of one) offers the engine.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Protocol

from turnqueue.domain import Session, Task, Turn
from turnqueue.store.notify import Listener
from turnqueue.store.protocol import Page, SessionKey, SessionView, TaskKey, TurnKey, Window
from turnqueue.store.tx import SqlTx as Tx

__all__ = [
    "Listener",
    "Page",
    "Reads",
    "SessionKey",
    "SessionView",
    "Store",
    "TaskKey",
    "TurnKey",
    "Tx",
    "Window",
]


class Reads(Protocol):
    """The reads of queries, each in one read transaction of its own (no lock): batches (one
    query for many ids) and keyset pages (G3). The engine hands them to the GraphQL layer as
    they are (``Engine.reads``)."""

    async def tasks(self, task_ids: Sequence[str]) -> dict[str, Task]:
        """The tasks found among ``task_ids``, by id."""

    async def sessions(self, session_ids: Sequence[str]) -> dict[str, Session]:
        """The sessions found among ``session_ids``, by id."""

    async def sessions_of_tasks(self, task_ids: Sequence[str]) -> dict[str, list[Session]]:
        """Each task's sessions, oldest first (an empty list for a task without any)."""

    async def tasks_page(self, owner: str, window: Window[TaskKey]) -> Page[TaskKey, Task]:
        """The owner's tasks, newest first. Another owner's tasks are never read (S2)."""

    async def sessions_page(
        self, task_id: str, window: Window[SessionKey]
    ) -> Page[SessionKey, Session]:
        """The task's sessions, oldest first."""

    async def turns_page(self, session_id: str, window: Window[TurnKey]) -> Page[TurnKey, Turn]:
        """The session's turns, oldest first."""


class Store(Reads, Protocol):
    """A database behind the :class:`Tx` interface, plus the reads that need no lock."""

    def transaction(self) -> AbstractAsyncContextManager[Tx]:
        """A write transaction. Nested calls are not supported."""

    def read(self) -> AbstractAsyncContextManager[Tx]:
        """A read-only transaction (a consistent snapshot on PostgreSQL, WAL read on SQLite)."""

    def lease(self) -> AbstractAsyncContextManager[Tx]:
        """A write transaction for the instance lease (M6), on a connection that request
        traffic cannot take (PostgreSQL); the same as :meth:`transaction` on SQLite."""

    async def close(self) -> None: ...

    @property
    def shared(self) -> bool:
        """True when several processes may share the database (PostgreSQL)."""

    def listen(self, on_payload: Callable[[str], None], on_resync: Callable[[], None]) -> Listener:
        """A listener for every instance's notifications (M4), not yet started: each payload
        goes to ``on_payload``; ``on_resync`` is called after each reconnect, when what was
        sent during the outage is lost. Only where :attr:`shared` (PostgreSQL)."""

    async def notify(self, payloads: Sequence[str]) -> None:
        """Send runtime notifications to every instance now, in order."""

    async def ping(self) -> None: ...

    async def queue_depth(self) -> tuple[int, int]:
        """(visible, in flight) queue entries over every session (metrics)."""

    async def next_turn(self, session_id: str, after_turn_id: str | None) -> Turn | None:
        """The session's turn that started right after ``after_turn_id`` (None: its first
        turn), whatever its status; None when there is none (yet)."""
