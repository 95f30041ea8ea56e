"""Who may touch what (S2): a session or task the principal does not own is reported exactly like
one that does not exist, so ids cannot be probed.

A session's owner is remembered after its first successful check, so a busy session's mutations
cost no read for authorisation. Hazard: correct only because a session's owner is fixed at
creation and sessions are never deleted; if either ever changes, the cache must be invalidated
there.
"""

from __future__ import annotations

from collections import OrderedDict

from turnqueue.domain import Session, Task, is_valid_id
from turnqueue.errors import InvalidInput, NotFound
from turnqueue.logs import bind
from turnqueue.store import Store

#: Sessions whose owner is remembered (about 100 bytes each).
OWNER_CACHE_SIZE = 65_536


class Access:
    def __init__(self, store: Store) -> None:
        self._store = store
        self.owners: OrderedDict[str, str] = OrderedDict()

    async def session(self, principal: str, session_id: str, field: str = "sessionId") -> Session:
        """The session, read now, when ``principal`` owns it; else NotFound (S2)."""
        if not is_valid_id(session_id):
            raise InvalidInput(f"{field} is not a valid id", [field])
        async with self._store.read() as tx:
            session = await tx.get_session(session_id)
        if session is None or session.owner != principal:
            raise NotFound("session", [field])
        self._remember(session_id, session.owner)
        bind(session_id=session_id)  # the rest of this request's logs carry it
        return session

    async def check_session(self, principal: str, session_id: str) -> None:
        """:meth:`session` for callers that do not need the session (the owner remembered)."""
        owner = self.owners.get(session_id)
        if owner is None:
            await self.session(principal, session_id)
            return
        if owner != principal:
            raise NotFound("session", ["sessionId"])
        self.owners.move_to_end(session_id)
        bind(session_id=session_id)

    async def task(self, principal: str, task_id: str) -> Task:
        if not is_valid_id(task_id):
            raise InvalidInput("taskId is not a valid id", ["taskId"])
        async with self._store.read() as tx:
            task = await tx.get_task(task_id)
        if task is None or task.owner != principal:
            raise NotFound("task", ["taskId"])
        return task

    def _remember(self, session_id: str, owner: str) -> None:
        self.owners[session_id] = owner
        self.owners.move_to_end(session_id)
        if len(self.owners) > OWNER_CACHE_SIZE:
            self.owners.popitem(last=False)
