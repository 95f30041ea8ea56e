"""The engine's batch and page reads: what the GraphQL layer's loaders and connections read.

Resolvers read through the engine, never the store: this module is the part of the engine's
public face they page and batch with. The page types are the store's (re-exported here, so a
resolver imports nothing from ``turnqueue.store``): a :class:`Window` says which part of a
listing to read, a :class:`Page` is what came back, and each listing's key type says where an
item sits in it (a cursor encodes that key).

Authorisation (S2) is the caller's: these take ids the caller already authorised (a task's
sessions, a session's turns) or the calling principal (its tasks).
"""

from __future__ import annotations

from collections.abc import Sequence

from turnqueue.domain import Session, Task, Turn
from turnqueue.store import Store
from turnqueue.store.protocol import Page, SessionKey, TaskKey, TurnKey, Window

__all__ = ["Page", "Reads", "SessionKey", "TaskKey", "TurnKey", "Window"]


class Reads:
    """Batched reads (one query for many ids) and keyset pages (G3) of the store."""

    def __init__(self, store: Store) -> None:
        self._store = store

    # -- batches (DataLoaders) ------------------------------------------------------------------
    async def tasks(self, task_ids: Sequence[str]) -> dict[str, Task]:
        """The tasks found among ``task_ids``, by id."""
        return await self._store.tasks(task_ids)

    async def sessions(self, session_ids: Sequence[str]) -> dict[str, Session]:
        """The sessions found among ``session_ids``, by id."""
        return await self._store.sessions(session_ids)

    async def sessions_of_tasks(self, task_ids: Sequence[str]) -> dict[str, list[Session]]:
        """Each task's sessions, oldest first (a task without any is absent)."""
        return await self._store.sessions_of_tasks(task_ids)

    # -- pages (connections): see ``Store.tasks_page`` and the rest --------------------------
    async def tasks_page(self, owner: str, window: Window[TaskKey]) -> Page[TaskKey, Task]:
        return await self._store.tasks_page(owner, window)

    async def sessions_page(
        self, task_id: str, window: Window[SessionKey]
    ) -> Page[SessionKey, Session]:
        return await self._store.sessions_page(task_id, window)

    async def turns_page(self, session_id: str, window: Window[TurnKey]) -> Page[TurnKey, Turn]:
        return await self._store.turns_page(session_id, window)
