"""Recording the SQL the server sends to its database, and replaying it (P4's and P8's baselines).

A baseline for "what the job costs without turnqueue" must do the same database work as turnqueue
does. Rather than a hand-copied list of statements that drifts when the engine changes, the bench
server records what the store actually sent for one request, and the baseline endpoint replays
exactly that: the same statement texts, the same parameters, the same transactions, in the same
order (``bench/server.py``; ``tests/bench/test_sql_replay.py`` checks it).

How statements are seen (installed by :func:`install` at the bench server's start, so that every
connection the store opens is known; nothing runs per statement while no recording is active):

* SQLite: every ``sqlite3`` connection of the process gets a trace callback
  (``set_trace_callback``) while recording: what SQLite itself ran, on which connection, in order,
  including BEGIN/COMMIT. Python 3.11 passes the statement with its parameters inlined, so the
  store's parameterised form is recovered from its plans (``CompiledSql.args`` is wrapped while
  recording: the SQL text and the positional arguments, just before each statement runs) by
  inlining those arguments the way SQLite does and matching. Connections are opened with
  ``check_same_thread=False`` so the callback can be set from the event loop on aiosqlite's
  connections (aiosqlite uses each connection from its own thread anyway).
* PostgreSQL: every asyncpg connection gets a query logger (``add_query_logger``) while
  recording: each query's text and arguments as asyncpg sent them, BEGIN/COMMIT included.

Transactions are grouped per connection from BEGIN to COMMIT/ROLLBACK; a statement outside one
is a transaction of its own. :attr:`Statement.seen` is what the driver reported (SQLite: the
expanded text; PostgreSQL: text and arguments), the ground truth two recordings are compared by.
"""

from __future__ import annotations

import asyncio
import itertools
import sqlite3
import sqlite3.dbapi2
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import asyncpg
import asyncpg.connection

from turnqueue.store.statement import CompiledSql

CONTROL = ("BEGIN", "COMMIT", "ROLLBACK", "END", "SAVEPOINT", "RELEASE", "PRAGMA")


@dataclass(frozen=True, slots=True)
class Statement:
    sql: str
    params: tuple[Any, ...]
    #: What the driver reported, for comparisons: SQLite's expanded text, or (text, args).
    seen: str


@dataclass(frozen=True, slots=True)
class Transaction:
    connection: str  # which of the process's connections ran it ("sqlite-2", "pg-1")
    statements: tuple[Statement, ...]


@dataclass(frozen=True, slots=True)
class Recording:
    transactions: tuple[Transaction, ...]
    #: SQLite statements not run through the store's plans, replayed as SQLite reported them
    #: (parameters inlined, if they had any). 0 when every statement's parameters are known.
    unmatched: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "unmatched": self.unmatched,
            "transactions": [
                {
                    "connection": tx.connection,
                    "statements": [
                        {"sql": s.sql, "params": [_jsonable(p) for p in s.params], "seen": s.seen}
                        for s in tx.statements
                    ],
                }
                for tx in self.transactions
            ],
        }


def _jsonable(value: Any) -> Any:
    """A parameter as JSON can carry it (for reading; the replay keeps the real values)."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return str(value)


def is_control(sql: str) -> bool:
    return sql.lstrip().upper().startswith(CONTROL)


def _last_word(sql: str) -> str:
    """The first word of the last statement in ``sql`` (``COMMIT`` for ``SELECT …; COMMIT``)."""
    last = sql.strip().rstrip(";").rpartition(";")[2].split(None, 1)
    return last[0].upper() if last else ""


def is_simple(sql: str, params: Sequence[Any]) -> bool:
    """Whether the store sent ``sql`` as a simple query (``execute`` without arguments): its
    control statements, and those it folds a BEGIN or a COMMIT into (PostgreSQL:
    ``BEGIN …; SELECT … FOR UPDATE``, ``NOTIFY …; COMMIT``), literals inlined."""
    return not params and (is_control(sql) or _last_word(sql) in CONTROL)


# -- the registry of connections ----------------------------------------------------------------
#: sqlite3 connections cannot be weakly referenced: kept (a handful; closed ones are skipped).
_sqlite: dict[sqlite3.Connection, str] = {}
_pg: weakref.WeakKeyDictionary[asyncpg.Connection, str] = weakref.WeakKeyDictionary()
_numbers = itertools.count(1)
_active: list[Recorder] = []
_installed: list[bool] = []


def install() -> None:
    """Know every connection opened from now on (call before the store opens any)."""
    if _installed:
        return
    _installed.append(True)
    sqlite_connect = sqlite3.connect
    pg_connect = asyncpg.connection.connect

    def connect_sqlite(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        kwargs["check_same_thread"] = False
        conn: sqlite3.Connection = sqlite_connect(*args, **kwargs)
        _sqlite[conn] = f"sqlite-{next(_numbers)}"
        for recorder in _active:
            recorder.watch_sqlite(conn)
        return conn

    async def connect_pg(*args: Any, **kwargs: Any) -> Any:
        conn = await pg_connect(*args, **kwargs)
        _pg[conn] = f"pg-{next(_numbers)}"
        for recorder in _active:
            recorder.watch_pg(conn)
        return conn

    # pysqlite (SQLAlchemy) calls ``sqlite3.dbapi2.connect``, aiosqlite ``sqlite3.connect``.
    sqlite3.connect = sqlite3.dbapi2.connect = connect_sqlite  # type: ignore[assignment]
    asyncpg.connection.connect = connect_pg


# -- recording ----------------------------------------------------------------------------------
class Recorder:
    """Between :meth:`start` and :meth:`stop`, everything every known connection runs."""

    def __init__(self) -> None:
        self._traced: list[tuple[str, str, tuple[Any, ...] | None]] = []  # (conn, text, args)
        self._captured: list[tuple[str, tuple[Any, ...]]] = []  # CompiledSql.args: (sql, args)
        self._pg_hooks: list[tuple[asyncpg.Connection, Callable[[Any], None]]] = []
        self._sqlite_hooks: list[sqlite3.Connection] = []
        self._plan_args: Callable[..., list[Any]] | None = None

    def start(self) -> None:
        if _active:
            raise RuntimeError("a recording is already running")
        _active.append(self)
        original = CompiledSql.args
        captured = self._captured

        def args(plan: CompiledSql, given: Mapping[str, Any] | None) -> list[Any]:
            result = original(plan, given)
            captured.append((plan.sql, tuple(result)))
            return result

        self._plan_args = original
        CompiledSql.args = args  # type: ignore[method-assign,assignment]
        for conn in list(_sqlite):
            if not _open(conn):
                del _sqlite[conn]
            else:
                self.watch_sqlite(conn)
        for pg in list(_pg):
            self.watch_pg(pg)

    def watch_sqlite(self, conn: sqlite3.Connection) -> None:
        tag = _sqlite.get(conn, "sqlite-?")
        traced = self._traced
        try:
            conn.set_trace_callback(lambda text: traced.append((tag, text, None)))
        except sqlite3.ProgrammingError:  # closed
            return
        self._sqlite_hooks.append(conn)

    def watch_pg(self, conn: asyncpg.Connection) -> None:
        if conn.is_closed():
            return
        tag = _pg.get(conn, "pg-?")
        traced = self._traced

        def logged(record: Any) -> None:
            traced.append((tag, str(record.query), tuple(record.args or ())))

        conn.add_query_logger(logged)
        self._pg_hooks.append((conn, logged))

    async def stop(self) -> Recording:
        for _ in range(3):  # asyncpg calls its loggers with call_soon after each query
            await asyncio.sleep(0)
        if self._plan_args is not None:
            CompiledSql.args = self._plan_args  # type: ignore[method-assign]
        for conn in self._sqlite_hooks:
            try:
                conn.set_trace_callback(None)
            except sqlite3.ProgrammingError:
                pass
        for pg, hook in self._pg_hooks:
            if not pg.is_closed():
                pg.remove_query_logger(hook)
        if self in _active:
            _active.remove(self)
        found, unmatched = self._statements()
        return Recording(_group(found), unmatched)

    def _statements(self) -> tuple[list[tuple[str, Statement | None]], int]:
        """Every traced statement with its parameterised form (None: a trigger's echo), and how
        many SQLite statements matched no plan."""
        pending = list(self._captured)
        unmatched = 0
        previous: dict[str, str] = {}
        found: list[tuple[str, Statement | None]] = []
        for tag, text, args in list(self._traced):
            if args is not None:  # PostgreSQL: the logger saw text and arguments
                seen = f"{text} {list(args)!r}" if args else text
                found.append((tag, Statement(text, args, seen)))
                continue
            if is_control(text):
                found.append((tag, Statement(text, (), text)))
            else:
                match = next((c for c in pending if inline(*c) == text), None)
                if match is not None:
                    pending.remove(match)
                    found.append((tag, Statement(match[0], match[1], text)))
                elif previous.get(tag) == text:
                    found.append((tag, None))  # SQLite traces a trigger as its statement again
                else:
                    found.append((tag, Statement(text, (), text)))
                    unmatched += 1
            previous[tag] = text
        return found, unmatched


def _open(conn: sqlite3.Connection) -> bool:
    try:
        conn.total_changes  # noqa: B018  (raises on a closed connection)
    except sqlite3.ProgrammingError:
        return False
    return True


def _group(statements: Sequence[tuple[str, Statement | None]]) -> tuple[Transaction, ...]:
    """Per connection, BEGIN … COMMIT/ROLLBACK is one transaction; a statement outside one is
    its own. Ordered by each transaction's first statement."""
    open_: dict[str, list[Statement]] = {}
    done: list[tuple[int, Transaction]] = []
    first: dict[str, int] = {}
    for index, (tag, statement) in enumerate(statements):
        if statement is None:
            continue
        word = statement.sql.split(None, 1)[0].rstrip(";").upper()
        last = _last_word(statement.sql)  # a COMMIT folded into the statement ends it
        if word == "BEGIN" or tag not in open_:
            if tag in open_:  # BEGIN inside an open one: close it (should not happen)
                done.append((first[tag], Transaction(tag, tuple(open_.pop(tag)))))
            open_[tag] = []
            first[tag] = index
        open_[tag].append(statement)
        if last in ("COMMIT", "ROLLBACK", "END") or (word != "BEGIN" and len(open_[tag]) == 1):
            done.append((first[tag], Transaction(tag, tuple(open_.pop(tag)))))
    for tag, rest in open_.items():
        done.append((first[tag], Transaction(tag, tuple(rest))))
    done.sort(key=lambda item: item[0])
    return tuple(tx for _, tx in done)


def inline(sql: str, args: Sequence[Any]) -> str:
    """``sql`` with its ``?`` placeholders replaced by ``args`` as SQLite's
    ``sqlite3_expanded_sql`` writes them (what the trace callback is given)."""
    parts = sql.split("?")
    if len(parts) != len(args) + 1:
        return ""
    out = [parts[0]]
    for value, part in zip(args, parts[1:], strict=True):
        out.append(_literal(value))
        out.append(part)
    return "".join(out)


def _literal(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bool | int):
        return str(int(value))
    if isinstance(value, float):
        text = f"{value:.15g}"
        return text if any(c in text for c in ".en") else text + ".0"
    if isinstance(value, bytes | bytearray | memoryview):
        return "x'" + bytes(value).hex() + "'"
    return "'" + str(value).replace("'", "''") + "'"


# -- replaying ----------------------------------------------------------------------------------
def replay_sqlite(conn: sqlite3.Connection, recording: Recording) -> int:
    """Every statement on ``conn`` (``isolation_level=None``), rows fetched; rows read."""
    rows = 0
    for tx in recording.transactions:
        for statement in tx.statements:
            rows += len(conn.execute(statement.sql, statement.params).fetchall())
    return rows


async def replay_pg(conn: Any, recording: Recording) -> int:
    """Every statement on an asyncpg connection: simple queries (BEGIN/COMMIT, and the
    statements folded into them) with ``execute``, the others with their arguments
    (``fetch``), as the store sends them; rows read."""
    rows = 0
    for tx in recording.transactions:
        for statement in tx.statements:
            if is_simple(statement.sql, statement.params):
                await conn.execute(statement.sql)
            else:
                rows += len(await conn.fetch(statement.sql, *statement.params))
    return rows
