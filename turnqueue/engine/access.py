"""What the engine lets in: who may touch what (:class:`Access`, S2) and the ids and content a
caller may send (S3, Q15), checked before any rule runs; an id that cannot be one is
INVALID_INPUT on its field.
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
    """Who may touch what (S2): a session or task the principal does not own is reported
    exactly like one that does not exist, so ids cannot be probed. A session's owner is
    remembered after its first successful check (no read per mutation).

    Hazard: correct only because a session's owner is fixed at creation and sessions are never
    deleted; if either ever changes, the cache must be invalidated there."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self.owners: OrderedDict[str, str] = OrderedDict()

    async def session(self, principal: str, session_id: str, field: str = "sessionId") -> Session:
        """The session, read now, when ``principal`` owns it; else NotFound (S2)."""
        check_id(session_id, field)
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
        check_id(task_id, "taskId")
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


def check_content(content: str, limit: int, field: str = "content") -> str:
    """S3: content must be non-blank and at most ``limit`` bytes of UTF-8."""
    if not content.strip():
        raise InvalidInput(f"{field} must not be empty", [field])
    if "\x00" in content:  # PostgreSQL text cannot hold it: refused alike on both stores (M3)
        raise InvalidInput(f"{field} must not contain NUL characters", [field])
    try:
        size = len(content.encode("utf-8"))
    except UnicodeEncodeError:  # a lone surrogate (JSON allows "\ud800"): no store can hold it
        message = f"{field} must be valid Unicode (it holds a lone surrogate)"
        raise InvalidInput(message, [field]) from None
    if size > limit:
        raise InvalidInput(f"{field} is {size} bytes; the limit is {limit}", [field])
    return content


def check_id(value: str | None, field: str) -> None:
    """An id the caller names (``entryId``, ``clarificationId``; None: none) must be one."""
    if value is not None and not is_valid_id(value):
        raise InvalidInput(f"{field} is not a valid id", [field])


#: Q15: a client's key is 1 to this many characters.
MAX_CLIENT_MESSAGE_ID = 128


def check_client_message_id(key: str | None) -> None:
    if key is None:
        return
    if not 0 < len(key) <= MAX_CLIENT_MESSAGE_ID or not key.strip() or "\x00" in key:
        raise InvalidInput(
            f"clientMessageId must be 1 to {MAX_CLIENT_MESSAGE_ID} characters, not blank",
            ["clientMessageId"],
        )
