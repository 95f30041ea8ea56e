"""``turnqueue.store.rows``: the generic row → domain mapper and its inverse."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from sqlalchemy import select
from sqlalchemy.dialects.sqlite import pysqlite

from turnqueue.domain import (
    AgentErrorKind,
    MessageSource,
    QueueEntry,
    QueuePolicy,
    SendOutcome,
    SentMessage,
    Turn,
    TurnStatus,
)
from turnqueue.store.rows import RowMap, turn_from, values_of
from turnqueue.store.statement import CompiledSql, Record
from turnqueue.store.tables import turns

AT = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)
TURN = Turn(
    id="t1",
    session_id="s1",
    prompt="hello",
    source=MessageSource.USER,
    status=TurnStatus.FAILED,
    output="out",
    error="boom",
    started_at=AT,
    ended_at=AT,
    owner=7,
    error_kind=AgentErrorKind.AGENT_EXITED,
    agent_stderr="trace",
    client_message_id="k1",
    entry_id="e1",
)


def _turn_row(**changed: object) -> Record:
    """A row of ``select(turns)`` holding what storing ``TURN`` stores (``seq`` is no field)."""
    stored = {**values_of(TURN), "seq": 3, **changed}
    plan = CompiledSql.compile(select(turns), pysqlite.dialect())
    assert plan.record is not None
    return plan.record(stored[key] for key in plan.record._keys)


def test_a_stored_turn_reads_back_equal_with_its_enums() -> None:
    turn = turn_from(_turn_row())
    assert turn == TURN
    assert type(turn.source) is MessageSource and type(turn.error_kind) is AgentErrorKind


def test_values_of_stores_an_enum_as_its_value_under_the_prefix() -> None:
    sent = SentMessage("k", "d", SendOutcome.QUEUED, "e1", None, 2, AT)
    assert values_of(sent, "p_") == {
        "p_key": "k",
        "p_digest": "d",
        "p_outcome": "QUEUED",
        "p_entry_id": "e1",
        "p_turn_id": None,
        "p_position": 2,
        "p_queued_at": AT,
    }


def test_a_null_enum_column_reads_none() -> None:
    assert turn_from(_turn_row(error_kind=None)).error_kind is None


def test_prefixed_columns_and_a_field_the_caller_gives() -> None:
    entries = RowMap(QueueEntry, prefix="entry_", skip=("position",))
    values = {
        "id": "another table's",
        "entry_id": "e1",
        "entry_session_id": "s1",
        "entry_content": "hi",
        "entry_source": "WORKFLOW",
        "entry_queued_at": AT,
        "entry_client_message_id": None,
    }
    index = {key: i for i, key in enumerate(values)}
    record = type("Record", (Record,), {"__slots__": (), "_keys": tuple(values), "_index": index})
    entry = entries(record(values.values()), position=4)
    assert entry == QueueEntry("e1", "s1", 4, "hi", MessageSource.WORKFLOW, AT, None)


def test_an_unknown_enum_value_names_its_column() -> None:
    with pytest.raises(ValueError, match="status holds 'LOST', not a TurnStatus"):
        turn_from(_turn_row(status="LOST"))


def test_the_view_is_built_field_by_field_from_its_columns() -> None:
    """``view_from`` builds the view and its policy positionally (the lock's hot path): each
    field must come from the column of its meaning, whatever the fields' order."""
    from sqlalchemy.dialects import sqlite

    from turnqueue.domain import PauseReason, SessionState
    from turnqueue.store.rows import VIEW, view_from

    plan = VIEW.plan(sqlite.dialect())
    assert plan.record is not None
    stored = {
        "id": "s1",
        "task_id": "t1",
        "agent": "scripted",
        "state": "RUNNING",
        "revision": 4,
        "created_at": AT,
        "updated_at": AT,
        "complete_on_idle": False,
        "owner": "o1",
        "queue_revision": 11,
        "auto_run": False,
        "pause_reason": "USER",
        "clarification_id": None,
        "queued": 5,
        "running_turn_id": "r1",
        "running_turn_owner": 6,
        "cancel_mark": "m1",
        "cancelling": 1,
        "cancel_revision": 13,
        "transitioning": 0,
        "approval_pending": 1,
    }
    view = view_from(plan.record(stored.get(key) for key in plan.record._keys))
    assert (view.session.id, view.session.owner, view.session.state) == (
        "s1",
        "o1",
        SessionState.RUNNING,
    )
    assert view.policy == QueuePolicy("s1", False, PauseReason.USER, 11)
    assert view.clarification is None
    assert (view.queued, view.running_turn_id, view.running_turn_owner) == (5, "r1", 6)
    assert (view.cancel_mark, view.cancelling, view.cancel_revision) == ("m1", True, 13)
    assert (view.transitioning, view.approval_pending) == (False, True)
