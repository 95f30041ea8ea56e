"""SQLAlchemy engines: the migrations' ``AsyncEngine`` (aiosqlite, asyncpg) and the synchronous
(pysqlite) engine that makes the SQLite store's connections (``store/sqlite_conn.py``).

SQLite: pysqlite's implicit BEGIN is disabled (``isolation_level = None``) and SQLAlchemy's
``begin`` event emits ours (SQLAlchemy's documented recipe), ``BEGIN IMMEDIATE`` for a
connection with the execution option :data:`IMMEDIATE` (the migrations: the write lock taken up
front, so a transaction never fails upgrading from a read lock).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import create_engine as sa_create_engine
from sqlalchemy import event
from sqlalchemy.engine import Connection, Engine, make_url
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.pool import ConnectionPoolEntry, NullPool

from turnqueue.settings import async_database_url

#: Execution option that makes the ``begin`` event emit ``BEGIN IMMEDIATE`` (SQLite only).
IMMEDIATE = "turnqueue_begin_immediate"

SQLITE_BUSY_TIMEOUT_MS = 30_000


def create_engine_for_url(url: str) -> AsyncEngine:
    """The migrations' engine (timeouts of 30 s)."""
    url = async_database_url(url)
    if url.startswith("sqlite"):
        engine = create_async_engine(url, connect_args={"timeout": SQLITE_BUSY_TIMEOUT_MS / 1000})
        _configure_sqlite(engine.sync_engine, busy_timeout_ms=SQLITE_BUSY_TIMEOUT_MS)
        return engine
    return create_async_engine(
        url,
        pool_size=5,
        max_overflow=5,
        pool_timeout=30,
        pool_recycle=1800,
        connect_args={"timeout": 30, "command_timeout": 30},
    )


def create_sqlite_writer_engine(url: str, *, timeout: float = 30.0) -> Engine:
    """The engine of the SQLite store's connections, with the same pragmas. Hazard: it pools
    none (``NullPool``): the store keeps its own, on the event loop, where waiting for a pool's
    limit would block the loop (and so whoever could give a connection back)."""
    busy_timeout_ms = int(timeout * 1000) or SQLITE_BUSY_TIMEOUT_MS
    engine = sa_create_engine(
        make_url(url).set(drivername="sqlite+pysqlite"),
        connect_args={"timeout": busy_timeout_ms / 1000},
        poolclass=NullPool,
    )
    _configure_sqlite(engine, busy_timeout_ms=busy_timeout_ms)
    return engine


def _configure_sqlite(engine: Engine, *, busy_timeout_ms: int) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: ConnectionPoolEntry) -> None:
        # Take transaction control away from the driver (we emit BEGIN ourselves below).
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute(f"PRAGMA busy_timeout={busy_timeout_ms}")
            _ensure_wal(cursor)
            cursor.execute("PRAGMA synchronous=NORMAL")
            cursor.execute("PRAGMA foreign_keys=ON")
        finally:
            cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        immediate = conn.get_execution_options().get(IMMEDIATE, False)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")


def _ensure_wal(cursor: Any) -> None:
    """Switch the file to WAL (persistent in the file, so only the first connection changes it).

    HAZARD: switching needs an exclusive lock and SQLite may answer "database is locked" at once
    (without the busy handler) when several connections open a fresh file together. Whoever
    wins switches it for everyone, so on failure we only re-read the mode.
    """
    cursor.execute("PRAGMA journal_mode")
    if str(cursor.fetchone()[0]).lower() == "wal":
        return
    try:
        cursor.execute("PRAGMA journal_mode=WAL")
    except Exception:
        cursor.execute("PRAGMA journal_mode")
        if str(cursor.fetchone()[0]).lower() != "wal":
            raise
