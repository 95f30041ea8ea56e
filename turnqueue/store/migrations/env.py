"""Alembic environment, async-capable, for SQLite (aiosqlite) and PostgreSQL (asyncpg).

Two ways in:

* programmatic (``turnqueue.store.migrate.migrate``): the caller opens the connection and passes
  it in ``config.attributes["connection"]``; migrations run on it synchronously (inside
  ``AsyncConnection.run_sync``);
* the ``alembic`` command line: the URL comes from ``config.attributes["url"]``, the
  ``sqlalchemy.url`` option or ``TURNQUEUE_DATABASE_URL``, and an async engine is created here.
"""

from __future__ import annotations

import asyncio
import os

from alembic import context
from sqlalchemy.engine import Connection

from turnqueue.store.drivers import create_engine_for_url
from turnqueue.store.tables import metadata

config = context.config


def _url() -> str:
    url = config.attributes.get("url") or config.get_main_option("sqlalchemy.url")
    return str(url or os.environ.get("TURNQUEUE_DATABASE_URL", "sqlite:///turnqueue.db"))


def _run_on(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


async def _run_online() -> None:
    engine = create_engine_for_url(_url())
    try:
        async with engine.begin() as connection:
            await connection.run_sync(_run_on)
    finally:
        await engine.dispose()


def _run_offline() -> None:
    context.configure(url=_url(), target_metadata=metadata, literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    _run_offline()
elif (connection := config.attributes.get("connection")) is not None:
    _run_on(connection)
else:
    asyncio.run(_run_online())
