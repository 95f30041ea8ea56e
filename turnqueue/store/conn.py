r"""How :class:`~turnqueue.store.tx.SqlTx` reaches the database: :class:`Conn`.

Every statement returns a :class:`Buffered` result: its rows already fetched, each a
:class:`~turnqueue.store.statement.Record`, whichever backend ran it. The executors are the
backends' own (``DriverConn`` in ``turnqueue.store.postgres``, ``SqliteConn`` in
``turnqueue.store.sqlite``); all run the same compiled
:class:`~turnqueue.store.statement.CompiledSql`\ s, so the row converters (``turnqueue.store.rows``)
see one row type.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar

from sqlalchemy import Executable
from sqlalchemy.exc import MultipleResultsFound, NoResultFound

from turnqueue.store.statement import Record, Statement

Params = Mapping[str, Any] | None
T = TypeVar("T")


class Buffered:
    """A statement's whole result, fetched where it ran: rows and ``rowcount``."""

    __slots__ = ("_rows", "rowcount")

    def __init__(self, rows: list[Record], rowcount: int) -> None:
        self._rows = rows
        self.rowcount = rowcount

    def __iter__(self) -> Iterator[Record]:
        return iter(self._rows)

    def all(self) -> list[Record]:
        return self._rows

    def one_or_none(self) -> Record | None:
        return only(self._rows)

    def one(self) -> Record:
        row = self.one_or_none()
        if row is None:
            raise NoResultFound("no row where one was expected")
        return row

    def scalar(self) -> Any:
        return self._rows[0][0] if self._rows else None

    def scalars(self) -> list[Any]:
        return [row[0] for row in self._rows]


def only(rows: list[Record]) -> Record | None:
    """The one row of ``rows``, or None; more than one is an error."""
    if len(rows) > 1:
        raise MultipleResultsFound("more than one row where one was expected")
    return rows[0] if rows else None


class Conn:
    """A transaction's connection: ``execute`` is the backend's, the others come from it."""

    __slots__ = ()

    async def execute(self, statement: Statement | Executable, params: Params = None) -> Buffered:
        raise NotImplementedError

    async def scalar(self, statement: Statement | Executable, params: Params = None) -> Any:
        return (await self.execute(statement, params)).scalar()

    async def scalars(self, statement: Statement | Executable, params: Params = None) -> list[Any]:
        return (await self.execute(statement, params)).scalars()

    async def one(self, statement: Statement | Executable, params: Params, key: str) -> Record:
        """The one row ``statement`` finds; ``KeyError(key)`` when there is none."""
        row = (await self.execute(statement, params)).one_or_none()
        if row is None:
            raise KeyError(key)
        return row

    async def maybe(
        self, statement: Statement | Executable, params: Params, build: Callable[[Record], T]
    ) -> T | None:
        """The one row ``statement`` finds, built; None when there is none."""
        row = (await self.execute(statement, params)).one_or_none()
        return build(row) if row is not None else None


class Statements:
    """The base of each aggregate's statements, a mixin of :class:`~turnqueue.store.tx.SqlTx`:
    the transaction's connection, and the sessions whose queue status it changed (``_touched``,
    see ``SqlTx.changed_queues``)."""

    _conn: Conn
    _touched: dict[str, None]
