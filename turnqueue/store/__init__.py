"""Persistence: the store the engine sees, its SQL implementation and migrations. The only
place SQL lives.

The caller owns the transaction (``async with store.transaction() as tx:``); store methods never
commit by themselves. An exception inside the block rolls everything back and no
``tx.after_commit`` callback runs: that is how events are published only after their
transaction commits.

Serialisation (Q3): every write of the policy and every reservation calls :meth:`Tx.lock` first
(how each backend serialises: ``store/sqlite.py``, ``store/postgres.py``). Revisions (R1, Q13):
methods that change a session's state, turns or clarification bump its revision themselves; a
queue gets one new revision per transaction that changed its status (:meth:`Tx.bump_queue`).
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
    """The reads of queries, each in a read transaction of its own (no lock): batches by id and
    keyset pages (G3)."""

    async def tasks(self, task_ids: Sequence[str]) -> dict[str, Task]: ...

    async def sessions(self, session_ids: Sequence[str]) -> dict[str, Session]: ...

    async def sessions_of_tasks(self, task_ids: Sequence[str]) -> dict[str, list[Session]]:
        """Each task's sessions, oldest first (an empty list for a task without any)."""

    async def tasks_page(self, owner: str, window: Window[TaskKey]) -> Page[TaskKey, Task]:
        """The owner's tasks, newest first. Another owner's tasks are never read (S2)."""

    async def sessions_page(
        self, task_id: str, window: Window[SessionKey]
    ) -> Page[SessionKey, Session]:
        """Oldest first."""

    async def turns_page(self, session_id: str, window: Window[TurnKey]) -> Page[TurnKey, Turn]:
        """Oldest first."""


class Store(Reads, Protocol):
    """A database: transactions (:class:`Tx`), plus the reads that need no lock."""

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
        """A listener (not yet started) for every instance's notifications (M4); only where
        :attr:`shared`. ``on_resync``: after each reconnect (what was sent meanwhile is lost)."""

    async def notify(self, payloads: Sequence[str]) -> None:
        """Send runtime notifications to every instance now, in order."""

    async def ping(self) -> None: ...

    async def queue_depth(self) -> tuple[int, int]:
        """(visible, in flight) queue entries over every session (metrics)."""

    async def next_turn(self, session_id: str, after_turn_id: str | None) -> Turn | None:
        """The session's turn that started right after ``after_turn_id`` (None: its first
        turn), whatever its status; None when there is none (yet)."""
