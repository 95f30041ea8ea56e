"""``turnqueue.store.statement``: SQLAlchemy Core statements run on the driver connection."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime

import pytest
from sqlalchemy import bindparam, column, literal_column, select, table
from sqlalchemy.dialects.postgresql import asyncpg as pg_asyncpg
from sqlalchemy.dialects.sqlite import pysqlite

from turnqueue.store.statement import CompiledSql, Statement
from turnqueue.store.tables import UtcDateTime, metadata, queue_entries

SQLITE = pysqlite.dialect()
PG = pg_asyncpg.dialect()


def test_no_table_has_a_python_side_default() -> None:
    """The driver path does not run SQLAlchemy's execution context, so a Python-side default
    or onupdate would silently not be applied: the schema must have none (server defaults
    only)."""
    found = [
        f"{t.name}.{c.name}"
        for t in metadata.sorted_tables
        for c in t.columns
        if c.default is not None or c.onupdate is not None
    ]
    assert found == []


def test_a_plan_binds_by_name_in_placeholder_order_with_the_dialects_processors() -> None:
    when = datetime(2026, 11, 30, 12, 0, 1, 5, tzinfo=UTC)
    stmt = select(
        bindparam("b", type_=UtcDateTime).label("at"), bindparam("a").label("name")
    ).where(literal_column("1") == bindparam("a"))
    plan = CompiledSql.compile(stmt, SQLITE)
    # UtcDateTime on SQLite: naive UTC text, as SQLAlchemy itself would bind it.
    assert plan.args({"a": "x", "b": when}) == ["2026-11-30 12:00:01.000005", "x", "x"]
    pg = CompiledSql.compile(stmt, PG)
    assert "$1" in pg.sql and pg.args({"a": "x", "b": when}) == [when, "x"]


def test_a_missing_parameter_is_named() -> None:
    plan = Statement(select(bindparam("p_session_id").label("id"))).plan(SQLITE)
    with pytest.raises(ValueError, match="p_session_id"):
        plan.args({})


def test_rows_come_back_processed_and_addressable_by_index_name_and_mapping() -> None:
    conn = sqlite3.connect(":memory:")
    stmt = select(
        bindparam("when", type_=UtcDateTime).label("at"),
        bindparam("n").label("n"),
        bindparam("n").label("n"),  # the same name twice: the first column wins
    )
    plan = CompiledSql.compile(stmt, SQLITE)
    when = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    (row,) = plan.rows(conn.execute(plan.sql, plan.args({"when": when, "n": 7})).fetchall())
    assert row[0] == when and row[0].tzinfo is UTC  # text back to an aware datetime
    assert row.at == when and row.n == 7 and row._mapping["n"] == 7
    with pytest.raises(AttributeError):
        _ = row.missing


def test_an_in_list_built_per_call_is_compiled_with_its_values() -> None:
    entries = table("queue_entries", column("id"))
    stmt = select(entries.c.id).where(entries.c.id.in_(["a", "b", "c"]))
    plan = CompiledSql.compile(stmt, SQLITE)
    assert plan.sql.count("?") == 3 and plan.args(None) == ["a", "b", "c"]


def test_a_statement_compiles_once_per_dialect() -> None:
    statement = Statement(
        select(queue_entries.c.id).where(queue_entries.c.session_id == bindparam("p_session_id"))
    )
    assert statement.plan(SQLITE) is statement.plan(SQLITE)
    assert statement.plan(PG) is not statement.plan(SQLITE)
    assert "$1" in statement.plan(PG).sql and "?" in statement.plan(SQLITE).sql


def test_p1_the_bare_postgresql_dialect_compiles_what_an_engine_s_would() -> None:
    """The PostgreSQL store has no SQLAlchemy engine: its statements compile with a bare asyncpg
    dialect, to the very SQL, parameters and processors an asyncpg engine's dialect gives."""
    from sqlalchemy.ext.asyncio import create_async_engine

    from turnqueue.store import entries, instances, output, postgres, queuestate, rows, tx

    engine = create_async_engine("postgresql+asyncpg://nobody@127.0.0.1:1/none")
    compared = 0
    for module in (tx, entries, rows, instances, output, queuestate, postgres):
        for value in vars(module).values():
            for statement in value.values() if isinstance(value, dict) else [value]:
                if not isinstance(statement, Statement):
                    continue
                ours, theirs = (
                    statement.plan(postgres.DIALECT),
                    CompiledSql.compile(statement.clause, engine.dialect),
                )
                assert ours.sql == theirs.sql
                assert [n for n, _ in ours.params] == [n for n, _ in theirs.params]
                assert [type(p) for _, p in ours.params] == [type(p) for _, p in theirs.params]
                assert ours.bound == theirs.bound
                assert (ours.results is None) == (theirs.results is None)
                compared += 1
    assert compared > 20


def test_statements_with_one_column_list_share_their_row_class() -> None:
    """A statement built per call is compiled per call: its rows must not get a new class each
    time (the row mappers cache by row class)."""
    first = CompiledSql.compile(select(queue_entries).where(queue_entries.c.id == "a"), SQLITE)
    second = CompiledSql.compile(select(queue_entries).limit(3), PG)
    assert first.record is not None and first.record is second.record
