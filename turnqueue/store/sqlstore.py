"""``SqlStore``: what both backends' stores share: the reads of queries and metrics, each in one
read transaction (:meth:`SqlStore.read`), and the keyset pages of the long listings (G3).

A page is a window of one listing in its fixed order, bounded by the keys of two items
(exclusive) and cut to the first or the last ``n``: a key comparison and ``LIMIT n + 1`` (the
extra row says whether more lie beyond), never ``OFFSET``, so a key (and the cursor a client
holds for it) keeps its position however many rows come and go around it. Every key ends with
a unique column; a page and its "is there more" checks run in one snapshot.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any

from sqlalchemy import ColumnElement, Select, and_, func, or_, select

from turnqueue.domain import MAX_PAGE, Session, Task, Turn, clamp_page
from turnqueue.store.protocol import Page, SessionKey, TaskKey, TurnKey, Window
from turnqueue.store.rows import select_sessions, session_from, task_from, turn_from
from turnqueue.store.statement import Record
from turnqueue.store.tables import queue_entries, sessions, tasks, turns
from turnqueue.store.tx import SqlTx


def _beyond(columns: Sequence[Any], key: Sequence[Any], *, later: bool) -> ColumnElement[bool]:
    """Rows strictly after (``later``) or strictly before ``key`` in ascending column order.

    Spelled out (``a > x OR (a = x AND b > y)``) rather than as a row-value comparison, which
    SQLAlchemy binds without the columns' types (``UtcDateTime`` must format SQLite's text)."""
    column, value = columns[0], key[0]
    strict: ColumnElement[bool] = column > value if later else column < value
    if len(columns) == 1:
        return strict
    return or_(strict, and_(column == value, _beyond(columns[1:], key[1:], later=later)))


@dataclass(frozen=True, slots=True, kw_only=True)
class Listing:
    """One listing: its base SELECT, the column that picks its rows (the owner, the task, the
    session), key columns (a key is their values), direction and items."""

    base: Select[Any]
    scope: Any
    columns: Sequence[Any]
    descending: bool  # newest first
    item_of: Callable[[Record], Any]

    def _key(self, key: Any) -> Sequence[Any]:
        return key if isinstance(key, tuple) else (key,)

    def key_of(self, row: Record) -> Any:
        """The row's key: the value of its one key column, or a tuple of them."""
        values = tuple(getattr(row, column.key) for column in self.columns)
        return values if len(values) > 1 else values[0]

    def after(self, key: Any) -> ColumnElement[bool]:
        """Rows after ``key`` in the listing's order."""
        return _beyond(self.columns, self._key(key), later=not self.descending)

    def before(self, key: Any) -> ColumnElement[bool]:
        """Rows before ``key`` in the listing's order."""
        return _beyond(self.columns, self._key(key), later=self.descending)

    def order(self, *, reverse: bool) -> list[Any]:
        descending = self.descending != reverse
        return [c.desc() if descending else c.asc() for c in self.columns]

    def at(self, key: Any) -> ColumnElement[bool]:
        return and_(*(c == v for c, v in zip(self.columns, self._key(key), strict=True)))


_TASKS = Listing(
    base=select(tasks),
    scope=tasks.c.owner,
    columns=(tasks.c.created_at, tasks.c.id),
    descending=True,
    item_of=task_from,
)
_SESSIONS = Listing(
    base=select_sessions(),
    scope=sessions.c.task_id,
    columns=(sessions.c.created_at, sessions.c.id),
    descending=False,
    item_of=session_from,
)
_TURNS = Listing(
    base=select(turns),
    scope=turns.c.session_id,
    columns=(turns.c.seq,),
    descending=False,
    item_of=turn_from,
)


class SqlStore:
    """The :class:`~turnqueue.store.Store` methods both backends share; the others are each
    backend's own (mypy refuses a backend that lacks one where the engine is given it)."""

    def read(self) -> AbstractAsyncContextManager[SqlTx]:
        raise NotImplementedError

    # -- shared reads -------------------------------------------------------------------------
    async def queue_depth(self) -> tuple[int, int]:
        stmt = select(queue_entries.c.in_flight, func.count()).group_by(queue_entries.c.in_flight)
        counts = {bool(flag): int(n) for flag, n in await self._all(stmt)}
        return counts.get(False, 0), counts.get(True, 0)

    async def _all(self, stmt: Select[Any]) -> list[Record]:
        async with self.read() as tx:
            return await tx.fetch(stmt)

    async def sessions_of_tasks(self, task_ids: Sequence[str]) -> dict[str, list[Session]]:
        result: dict[str, list[Session]] = {task_id: [] for task_id in task_ids}
        if not task_ids:
            return result
        stmt = (
            select_sessions()
            .where(sessions.c.task_id.in_(list(task_ids)))
            .order_by(sessions.c.created_at, sessions.c.id)
        )
        for row in await self._all(stmt):
            session = session_from(row)
            result[session.task_id].append(session)
        return result

    async def sessions(self, session_ids: Sequence[str]) -> dict[str, Session]:
        if not session_ids:
            return {}
        stmt = select_sessions().where(sessions.c.id.in_(list(session_ids)))
        return {s.id: s for s in map(session_from, await self._all(stmt))}

    async def tasks(self, task_ids: Sequence[str]) -> dict[str, Task]:
        if not task_ids:
            return {}
        stmt = select(tasks).where(tasks.c.id.in_(list(task_ids)))
        return {t.id: t for t in map(task_from, await self._all(stmt))}

    async def next_turn(self, session_id: str, after_turn_id: str | None) -> Turn | None:
        stmt = select(turns).where(turns.c.session_id == session_id)
        if after_turn_id is not None:
            after = select(turns.c.seq).where(turns.c.id == after_turn_id).scalar_subquery()
            stmt = stmt.where(turns.c.seq > after)
        rows = await self._all(stmt.order_by(turns.c.seq).limit(1))
        return turn_from(rows[0]) if rows else None

    async def tasks_page(self, owner: str, window: Window[TaskKey]) -> Page[TaskKey, Task]:
        return await self._page(_TASKS, owner, window)

    async def sessions_page(
        self, task_id: str, window: Window[SessionKey]
    ) -> Page[SessionKey, Session]:
        return await self._page(_SESSIONS, task_id, window)

    async def turns_page(self, session_id: str, window: Window[TurnKey]) -> Page[TurnKey, Turn]:
        return await self._page(_TURNS, session_id, window)

    async def _page(self, listing: Listing, scope: str, window: Window[Any]) -> Page[Any, Any]:
        """The window's items in listing order, and whether items lie before and after them.

        ``has_previous``/``has_next`` follow the Relay specification: counting first, the extra
        row answers ``has_next`` and ``has_previous`` is whether anything precedes ``after``
        (counting last, the mirror image)."""
        from_end = window.last is not None
        count = window.last if from_end else window.first
        limit = clamp_page(count if count is not None else MAX_PAGE)
        base = listing.base.where(listing.scope == scope)
        stmt = base
        if window.after is not None:
            stmt = stmt.where(listing.after(window.after))
        if window.before is not None:
            stmt = stmt.where(listing.before(window.before))
        stmt = stmt.order_by(*listing.order(reverse=from_end)).limit(limit + 1)
        # The bound on the side the window does not count from, and what lies beyond it.
        edge, beyond = (
            (window.before, listing.after) if from_end else (window.after, listing.before)
        )
        async with self.read() as tx:
            rows = await tx.fetch(stmt)
            more = len(rows) > limit
            other = edge is not None and bool(
                await tx.fetch(base.where(or_(listing.at(edge), beyond(edge))).limit(1))
            )
        rows = rows[:limit]
        if from_end:
            rows.reverse()
        items = [(listing.key_of(row), listing.item_of(row)) for row in rows]
        has_previous, has_next = (more, other) if from_end else (other, more)
        return Page(items=items, has_previous=has_previous, has_next=has_next)
