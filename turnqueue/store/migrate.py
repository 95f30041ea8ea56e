"""Upgrading a database to the newest schema programmatically (M5), without an alembic.ini."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import text
from sqlalchemy.engine import Connection

from turnqueue.settings import async_database_url
from turnqueue.store.drivers import IMMEDIATE, create_engine_for_url

MIGRATIONS = Path(__file__).with_name("migrations")
#: pg_advisory_xact_lock key: instances starting together (M4) upgrade one after the other.
_MIGRATION_LOCK_KEY = 0x7475726E71  # "turnq"
#: Alembic's ``context`` and ``op`` are process-global proxies: one upgrade at a time per process.
_PROCESS_LOCK = threading.Lock()


def alembic_config(url: str | None = None) -> Config:
    """An Alembic ``Config`` pointing at the packaged migrations (no file on disk needed)."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    if url is not None:
        config.attributes["url"] = async_database_url(url)
    return config


def _upgrade(connection: Connection, config: Config, revision: str) -> None:
    config.attributes["connection"] = connection
    command.upgrade(config, revision)


async def migrate(url: str, revision: str = "head") -> None:
    """Upgrade the database at ``url`` (plain or async form) to ``revision``; idempotent.

    The migrations run in one transaction on a connection opened here (``env.py`` uses the
    connection it is given), so a failed upgrade leaves the schema as it was on both dialects.
    """
    # Polled, not awaited in a thread, so a cancelled caller never leaves the lock held.
    while not _PROCESS_LOCK.acquire(blocking=False):  # noqa: ASYNC110 (a thread lock)
        await asyncio.sleep(0.01)
    try:
        await _migrate(url, revision)
    finally:
        _PROCESS_LOCK.release()


async def _migrate(url: str, revision: str) -> None:
    engine = create_engine_for_url(url)
    try:
        async with engine.connect() as connection:
            # SQLite: BEGIN IMMEDIATE takes the write lock up front, serialising migrators.
            await connection.execution_options(**{IMMEDIATE: True})
            async with connection.begin():
                if connection.dialect.name == "postgresql":
                    # Concurrent migrators wait here, then find the schema at head: a no-op.
                    await connection.execute(
                        text("SELECT pg_advisory_xact_lock(:key)"), {"key": _MIGRATION_LOCK_KEY}
                    )
                await connection.run_sync(_upgrade, alembic_config(url), revision)
    finally:
        await engine.dispose()
