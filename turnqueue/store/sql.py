"""Opening the store: :func:`open_store` picks the backend for ``settings.database_url``."""

from __future__ import annotations

from turnqueue.settings import Settings
from turnqueue.store.postgres import PostgresStore
from turnqueue.store.sqlite import SqliteStore
from turnqueue.store.sqlstore import SqlStore
from turnqueue.store.tx import SqlTx

__all__ = ["SqlStore", "SqlTx", "open_store"]


async def open_store(settings: Settings) -> SqliteStore | PostgresStore:
    """The store for ``settings``; no I/O yet. It does not migrate (``turnqueue.store.migrate``)."""
    url = settings.async_database_url
    if url.startswith("sqlite"):
        return SqliteStore(url, timeout=settings.db_timeout)
    return PostgresStore(url, timeout=settings.db_timeout, pool_size=settings.db_pool_size)
