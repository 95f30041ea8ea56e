"""M5: the Alembic migrations create exactly ``tables.metadata``, programmatically, idempotently."""

from __future__ import annotations

import asyncio
from typing import Any

from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import inspect, text
from sqlalchemy.engine import Connection

from turnqueue.store.drivers import create_engine_for_url
from turnqueue.store.migrate import alembic_config, migrate
from turnqueue.store.tables import metadata


async def _sync(url: str, fn: Any) -> Any:
    engine = create_engine_for_url(url)
    try:
        async with engine.connect() as conn:
            return await conn.run_sync(fn)
    finally:
        await engine.dispose()


def _tables(conn: Connection) -> set[str]:
    return set(inspect(conn).get_table_names())


def _version(conn: Connection) -> str | None:
    return MigrationContext.configure(conn).get_current_revision()


def _head() -> str | None:
    return ScriptDirectory.from_config(alembic_config()).get_current_head()


#: Keep ``queue_session_locks.queued`` (migration 0004); every later migration must keep them.
TRIGGERS = {
    "queue_entries_queued_insert",
    "queue_entries_queued_delete",
    "queue_entries_queued_update",
}


def _triggers(conn: Connection) -> set[str]:
    if conn.dialect.name == "postgresql":
        query = "SELECT tgname FROM pg_trigger WHERE NOT tgisinternal"
    else:
        query = "SELECT name FROM sqlite_master WHERE type = 'trigger'"
    return set(conn.execute(text(query)).scalars())


async def test_m5_migrate_creates_the_schema_on_an_empty_database(empty_database_url: str) -> None:
    assert await _sync(empty_database_url, _tables) == set()
    await migrate(empty_database_url)
    assert await _sync(empty_database_url, _tables) == set(metadata.tables) | {"alembic_version"}
    assert await _sync(empty_database_url, _version) == _head()
    assert await _sync(empty_database_url, _triggers) == TRIGGERS


async def test_m5_migrate_twice_is_a_no_op(empty_database_url: str) -> None:
    await migrate(empty_database_url)

    def insert_task(conn: Connection) -> None:
        conn.execute(
            text(
                "INSERT INTO tasks (id, title, owner, workflow_step, created_at) "
                "VALUES ('t1', 'kept', 'alice', 'IN_PROGRESS', CURRENT_TIMESTAMP)"
            )
        )
        conn.commit()

    await _sync(empty_database_url, insert_task)
    await migrate(empty_database_url)

    def titles(conn: Connection) -> list[str]:
        return list(conn.execute(text("SELECT title FROM tasks")).scalars())

    assert await _sync(empty_database_url, titles) == ["kept"]
    assert await _sync(empty_database_url, _version) == _head()


async def test_m5_migrated_schema_matches_the_sqlmodel_tables(empty_database_url: str) -> None:
    """Alembic autogenerate's comparison of a database migrated to head with the SQLModel
    tables' metadata (types and server defaults included) finds no difference."""
    await migrate(empty_database_url)

    def diff(conn: Connection) -> list[Any]:
        opts = {"compare_type": True, "compare_server_default": True}
        context = MigrationContext.configure(conn, opts=opts)
        return list(compare_metadata(context, metadata))

    assert await _sync(empty_database_url, diff) == []

    def indexes(conn: Connection) -> dict[str, set[str]]:
        inspector = inspect(conn)
        return {t: {i["name"] or "" for i in inspector.get_indexes(t)} for t in metadata.tables}

    found = await _sync(empty_database_url, indexes)
    for table in metadata.sorted_tables:
        assert {i.name for i in table.indexes} <= found[table.name], table.name


async def test_r2_epoch_source_exists(empty_database_url: str) -> None:
    await migrate(empty_database_url)

    def has_source(conn: Connection) -> bool:
        if conn.dialect.name == "postgresql":
            return "turnqueue_epoch_seq" in inspect(conn).get_sequence_names()
        return "epochs" in inspect(conn).get_table_names()

    assert await _sync(empty_database_url, has_source)


async def test_m4_concurrent_migrations_serialise(empty_database_url: str) -> None:
    """Several instances starting together on one empty database all come up at head."""
    await asyncio.gather(*(migrate(empty_database_url) for _ in range(3)))
    assert await _sync(empty_database_url, _version) == _head()
    assert await _sync(empty_database_url, _tables) == set(metadata.tables) | {"alembic_version"}


async def test_m5_env_runs_from_a_url_in_the_config(empty_database_url: str) -> None:
    """The Alembic CLI path: no connection handed over, env.py opens its own async engine."""
    config = alembic_config()
    config.set_main_option("sqlalchemy.url", empty_database_url.replace("%", "%%"))
    # env.py calls asyncio.run itself, so the command runs off this event loop.
    await asyncio.to_thread(command.upgrade, config, "head")
    assert await _sync(empty_database_url, _version) == _head()
    await asyncio.to_thread(command.downgrade, alembic_config(empty_database_url), "base")
    assert await _sync(empty_database_url, _tables) == {"alembic_version"}


async def test_m5_upgrade_from_0001_keeps_rows_and_adds_ownership(empty_database_url: str) -> None:
    await migrate(empty_database_url, revision="0001")

    def insert_task(conn: Connection) -> None:
        conn.execute(
            text(
                "INSERT INTO tasks (id, title, owner, workflow_step, created_at) "
                "VALUES ('t1', 'kept', 'alice', 'IN_PROGRESS', CURRENT_TIMESTAMP)"
            )
        )
        conn.commit()

    await _sync(empty_database_url, insert_task)
    await migrate(empty_database_url)

    def columns(conn: Connection) -> tuple[set[str], set[str], int]:
        inspector = inspect(conn)
        turn_cols = {c["name"] for c in inspector.get_columns("turns")}
        entry_cols = {c["name"] for c in inspector.get_columns("queue_entries")}
        kept = conn.execute(text("SELECT count(*) FROM tasks WHERE title = 'kept'")).scalar_one()
        return turn_cols, entry_cols, kept

    turn_cols, entry_cols, kept = await _sync(empty_database_url, columns)
    assert "owner" in turn_cols and "reserved_by" in entry_cols and kept == 1


async def test_p6_upgrade_to_0004_counts_existing_entries_and_keeps_counting(
    empty_database_url: str,
) -> None:
    """0004 backfills ``queue_session_locks.queued`` from the stored entries (in-flight ones not
    counted) and installs the triggers that keep it; downgrading removes them again."""
    await migrate(empty_database_url, revision="0003")

    def seed(conn: Connection) -> None:
        conn.execute(
            text(
                "INSERT INTO tasks (id, title, owner, workflow_step, created_at) "
                "VALUES ('t1', 'kept', 'alice', 'IN_PROGRESS', CURRENT_TIMESTAMP)"
            )
        )
        for sid in ("s1", "s2"):
            conn.execute(
                text(
                    "INSERT INTO sessions (id, task_id, agent, state, revision, created_at, "
                    "updated_at) VALUES (:sid, 't1', 'scripted', 'WAITING_FOR_INPUT', 1, "
                    "CURRENT_TIMESTAMP, CURRENT_TIMESTAMP)"
                ),
                {"sid": sid},
            )
            conn.execute(
                text("INSERT INTO queue_session_locks (session_id, revision) VALUES (:sid, 3)"),
                {"sid": sid},
            )
        for i, in_flight in enumerate([False, False, True, False]):
            conn.execute(
                text(
                    "INSERT INTO queue_entries (id, session_id, position, content, source, "
                    "queued_at, in_flight) VALUES (:id, 's1', :i, 'm', 'USER', "
                    "CURRENT_TIMESTAMP, :in_flight)"
                ),
                {"id": f"e{i}", "i": i, "in_flight": in_flight},
            )
        conn.commit()

    await _sync(empty_database_url, seed)
    await migrate(empty_database_url)

    def counters(conn: Connection) -> dict[str, int]:
        rows = conn.execute(text("SELECT session_id, queued FROM queue_session_locks"))
        return {sid: int(queued) for sid, queued in rows}

    assert await _sync(empty_database_url, counters) == {"s1": 3, "s2": 0}
    assert await _sync(empty_database_url, _triggers) >= TRIGGERS

    def change(conn: Connection) -> None:
        conn.execute(text("UPDATE queue_entries SET session_id = 's2' WHERE id IN ('e0', 'e2')"))
        conn.execute(text("DELETE FROM queue_entries WHERE id = 'e1'"))
        conn.commit()

    await _sync(empty_database_url, change)
    assert await _sync(empty_database_url, counters) == {"s1": 1, "s2": 1}

    await migrate_down(empty_database_url, "0003")
    assert await _sync(empty_database_url, _triggers) & TRIGGERS == set()

    def lock_columns(conn: Connection) -> set[str]:
        return {c["name"] for c in inspect(conn).get_columns("queue_session_locks")}

    assert "queued" not in await _sync(empty_database_url, lock_columns)
    await migrate(empty_database_url)  # and up again, counting what is there now
    assert await _sync(empty_database_url, counters) == {"s1": 1, "s2": 1}


async def migrate_down(url: str, revision: str) -> None:
    """The Alembic command line's downgrade (env.py runs its own event loop)."""
    await asyncio.to_thread(command.downgrade, alembic_config(url), revision)
