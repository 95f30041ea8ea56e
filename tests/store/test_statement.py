"""``turnqueue.store.statement``: SQLAlchemy Core statements run on the driver connection."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime, timedelta, timezone

import pytest
from sqlalchemy import Integer, bindparam, column, func, literal, literal_column, select, table
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


def test_sqlite_datetime_text_is_the_same_for_a_datetime_bound_again_or_after_another() -> None:
    """The text of the last datetime bound is kept (by identity) for the next bind of it."""
    to_text = UtcDateTime().bind_processor(SQLITE)
    assert to_text is not None
    first = datetime(2026, 11, 30, 12, 0, 1, 5, tzinfo=UTC)
    equal_elsewhere = first.astimezone(timezone(timedelta(hours=2)))
    other = datetime(2026, 11, 30, 12, 0, 1, tzinfo=UTC)
    texts = [to_text(v) for v in (first, first, equal_elsewhere, other, first, other, other)]
    assert texts == [
        "2026-11-30 12:00:01.000005",
        "2026-11-30 12:00:01.000005",
        "2026-11-30 12:00:01.000005",
        "2026-11-30 12:00:01.000000",
        "2026-11-30 12:00:01.000005",
        "2026-11-30 12:00:01.000000",
        "2026-11-30 12:00:01.000000",
    ]
    with pytest.raises(ValueError, match="naive"):
        to_text(datetime(2026, 11, 30))
    assert to_text(None) is None


def test_a_missing_parameter_is_named() -> None:
    plan = Statement(select(bindparam("p_session_id").label("id"))).plan(SQLITE)
    with pytest.raises(ValueError, match="p_session_id"):
        plan.args({})


def test_rows_come_back_processed_and_addressable_by_index_and_name() -> None:
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
    assert row.at == when and row.n == 7
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

    from turnqueue.store import (
        entries,
        instances,
        output,
        postgres,
        postgres_conn,
        queue_state,
        rows,
        turns,
        tx,
    )

    engine = create_async_engine("postgresql+asyncpg://nobody@127.0.0.1:1/none")
    compared = 0
    for module in (
        tx,
        turns,
        entries,
        queue_state,
        rows,
        instances,
        output,
        postgres,
        postgres_conn,
    ):
        for value in vars(module).values():
            for statement in value.values() if isinstance(value, dict) else [value]:
                if not isinstance(statement, Statement):
                    continue
                ours, theirs = (
                    statement.plan(postgres_conn.DIALECT),
                    CompiledSql.compile(statement.clause, engine.dialect, constants=True),
                )
                assert ours.sql == theirs.sql
                assert [n for n, _ in ours.params] == [n for n, _ in theirs.params]
                assert [type(p) for _, p in ours.params] == [type(p) for _, p in theirs.params]
                assert ours.bound == theirs.bound
                assert (ours.results is None) == (theirs.results is None)
                compared += 1
    assert compared > 20


def test_a_prebuilt_statement_carries_its_constants_in_its_sql() -> None:
    """The ints and bools SQLAlchemy binds under names of its own making (a LIMIT, SQLite's
    OFFSET, ``+ 1``, ``coalesce(…, 0)``) are literals in a prebuilt statement's SQL; named
    parameters stay parameters, a named one with a value too (a caller may set it)."""
    entries = queue_entries
    stmt = (
        select(
            func.coalesce(func.max(entries.c.position), 0) + 1,
            bindparam("p_default", 5).label("given"),
            literal(True).label("yes"),
        )
        .where(entries.c.session_id == bindparam("p_session_id"))
        .limit(1)
    )
    for dialect, placeholder in ((SQLITE, "?"), (PG, "$")):
        plan = Statement(stmt).plan(dialect)
        assert [name for name, _ in plan.params] == ["p_default", "p_session_id"]
        assert plan.sql.count(placeholder) == 2 and "LIMIT 1" in plan.sql
        assert dict(plan.bound) == {"p_default": 5}
        assert plan.args({"p_session_id": "s"}) == [5, "s"]
        assert plan.args({"p_session_id": "s", "p_default": 6}) == [6, "s"]
    assert "OFFSET 0" in Statement(stmt).plan(SQLITE).sql
    # Compiled per call, the constants stay parameters (their values change between calls).
    per_call = CompiledSql.compile(stmt, SQLITE)
    assert len(per_call.params) == 7 and "LIMIT ?" in per_call.sql


def test_a_prebuilt_statement_with_literal_constants_answers_as_before() -> None:
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE t (n INTEGER, flag BOOLEAN)")
    conn.executemany("INSERT INTO t VALUES (?, ?)", [(3, 1), (1, 0), (2, 1)])
    t = table("t", column("n"), column("flag"))
    stmt = (
        select((t.c.n + 10).label("m"), literal(False).label("no"))
        .where(t.c.flag == literal(True), t.c.n > bindparam("p_min", type_=Integer))
        .order_by(t.c.n)
        .limit(1)
        .offset(1)
    )
    prebuilt, per_call = Statement(stmt).plan(SQLITE), CompiledSql.compile(stmt, SQLITE)
    for plan in (prebuilt, per_call):
        args = plan.args({"p_min": 0})
        assert conn.execute(plan.sql, args).fetchall() == [(13, 0)]
    assert prebuilt.sql.count("?") == 1


def test_statements_with_one_column_list_share_their_row_class() -> None:
    """A statement built per call is compiled per call: its rows must not get a new class each
    time (the row mappers cache by row class)."""
    first = CompiledSql.compile(select(queue_entries).where(queue_entries.c.id == "a"), SQLITE)
    second = CompiledSql.compile(select(queue_entries).limit(3), PG)
    assert first.record is not None and first.record is second.record
