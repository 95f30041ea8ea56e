"""G3 cursors and paging arguments, unit by unit: opaque, round-tripping, bound to their
connection, and every malformed one refused with INVALID_INPUT before anything is read (S3)."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime
from functools import partial
from typing import Any

import pytest
from graphql import GraphQLError

from turnqueue import domain
from turnqueue.resolvers import connections
from turnqueue.resolvers.connections import encode_cursor, position_key, timestamp_key, window
from turnqueue.schema.connections import PageArgs

task_key = partial(timestamp_key, "task")
session_key = partial(timestamp_key, "session")
turn_key = partial(position_key, "turn")

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


# -- a turn's items (G3 over A3's in-memory listing) -------------------------------------------
def _items(n: int) -> list[domain.TurnItem]:
    return [domain.TurnItem(domain.ItemKind.THOUGHT, {"text": f"t{i}"}) for i in range(n)]


def _texts(conn: Any) -> list[str]:
    return [edge.node.text for edge in conn.edges]


def test_g3_items_page_forwards_and_backwards_without_gap_or_duplicate() -> None:
    """G3: a turn's items paged with first/after and with last/before cover the listing
    exactly once, in order, with Relay's pageInfo."""
    listing = _items(7)
    seen, after = [], None
    while True:
        page = connections.items(listing, PageArgs(first=3, after=after))
        seen += _texts(page)
        if not page.page_info.has_next_page:
            break
        assert page.page_info.has_previous_page is (after is not None)
        after = page.page_info.end_cursor
    assert seen == [f"t{i}" for i in range(7)]
    back, before = [], None
    while True:
        page = connections.items(listing, PageArgs(last=2, before=before))
        back = _texts(page) + back
        if not page.page_info.has_previous_page:
            break
        assert page.page_info.has_next_page is (before is not None)
        before = page.page_info.start_cursor
    assert back == seen


def test_g3_an_item_cursor_keeps_its_place_while_items_are_added() -> None:
    listing = _items(3)
    first = connections.items(listing, PageArgs(first=2))
    assert first.page_info.has_next_page
    listing += _items(5)[3:]  # the turn streams on
    rest = connections.items(listing, PageArgs(first=10, after=first.page_info.end_cursor))
    assert _texts(rest) == ["t2", "t3", "t4"] and not rest.page_info.has_next_page
    assert connections.items(listing, PageArgs(first=0)).edges == []
    assert connections.items(listing, PageArgs(last=0)).page_info.has_previous_page


@pytest.mark.parametrize(
    "cursor", ["nope", connections.encode_cursor("turn", 1), connections.encode_cursor("item", -1)]
)
def test_g3_a_bad_item_cursor_is_invalid_input(cursor: str) -> None:
    with pytest.raises(GraphQLError) as info:
        connections.items(_items(2), PageArgs(first=1, after=cursor))
    assert info.value.extensions == {"code": "INVALID_INPUT"}
