"""G3 cursors and paging arguments, unit by unit: opaque, round-tripping, bound to their
connection, and every malformed one refused with INVALID_INPUT before anything is read (S3)."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime

import pytest
from graphql import GraphQLError

from turnqueue.resolvers.connections import (
    encode_cursor,
    session_key,
    task_key,
    turn_key,
    window,
)
from turnqueue.schema.connections import PageArgs

ID = "0b0b0b0b-0000-4000-8000-000000000000"
AT = datetime(2026, 12, 1, 10, 0, 0, 123456, tzinfo=UTC)


def raw(value: object) -> str:
    return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")


def test_g3_cursors_round_trip_and_are_bound_to_their_connection() -> None:
    task = encode_cursor("task", AT.isoformat(), ID)
    assert task_key(task) == (AT, ID)
    assert session_key(encode_cursor("session", AT.isoformat(), ID)) == (AT, ID)
    assert turn_key(encode_cursor("turn", 7)) == 7
    assert ID not in task and "task" not in task  # opaque: no readable key in the cursor
    with pytest.raises(ValueError):
        session_key(task)
    with pytest.raises(ValueError):
        turn_key(task)


@pytest.mark.parametrize(
    "cursor",
    [
        "",
        "%%%",
        "bm9wZQ",  # "nope"
        raw({"task": 1}),
        raw([]),
        raw(["task"]),
        raw(["task", AT.isoformat()]),
        raw(["task", AT.isoformat(), "not-a-uuid"]),
        raw(["task", "yesterday", ID]),
        raw(["task", "2026-12-01T10:00:00", ID]),  # no time zone
        raw(["task", "0001-01-01T00:00:00+01:00", ID]),  # before year 1 in UTC
        raw(["task", AT.isoformat(), ID, "extra"]),
        base64.urlsafe_b64encode(b"[" * 140).decode(),  # unclosed nesting
        base64.urlsafe_b64encode(b"\xff\xfe").decode(),  # not UTF-8
        "A" * 5000,
    ],
)
def test_g3_s3_malformed_task_cursors_are_refused(cursor: str) -> None:
    with pytest.raises(ValueError):
        task_key(cursor)


@pytest.mark.parametrize("seq", [-1, 2**31, True, 1.5, "3", None])
def test_g3_s3_malformed_turn_cursors_are_refused(seq: object) -> None:
    with pytest.raises(ValueError):
        turn_key(raw(["turn", seq]))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (PageArgs(first=-1), "first must not be negative, not -1"),
        (PageArgs(last=-1), "last must not be negative, not -1"),
        (PageArgs(first=1, last=1), "pass first or last, not both"),
        (PageArgs(after="x"), "after is not a cursor of this connection"),
        (PageArgs(last=2, before="x"), "before is not a cursor of this connection"),
    ],
)
def test_g3_bad_paging_arguments_are_invalid_input(args: PageArgs, message: str) -> None:
    with pytest.raises(GraphQLError) as raised:
        window(args, turn_key)
    assert raised.value.message == message
    assert raised.value.extensions == {"code": "INVALID_INPUT"}


def test_g3_window_defaults_and_caps() -> None:
    assert window(PageArgs(), turn_key).first == 50
    assert window(PageArgs(first=10_000), turn_key).first == 200
    capped = window(PageArgs(last=201, before=encode_cursor("turn", 3)), turn_key)
    assert (capped.last, capped.before, capped.first) == (200, 3, None)
