"""Upgrading a database to the newest schema programmatically (M5), without an alembic.ini."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy.engine import Connection

from turnqueue.settings import async_database_url
from turnqueue.store.engine import create_engine_for_url

MIGRATIONS = Path(__file__).with_name("migrations")


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
    engine = create_engine_for_url(url)
    try:
        async with engine.begin() as connection:
            await connection.run_sync(_upgrade, alembic_config(url), revision)
    finally:
        await engine.dispose()
