"""Connection resolvers (G3): check the paging arguments, read one keyset page, build the page.

Cursors are opaque to clients: URL-safe base64 of a JSON array ``[kind, *key]``, where the key is
the item's immutable sort key in its listing (``(created_at, id)`` for tasks and sessions, the
per-session ``seq`` for turns). A cursor therefore keeps its place while rows are inserted, and
one of another listing (another ``kind``) is refused like a malformed one.

Bad arguments are a top-level GraphQL error with ``extensions.code`` ``INVALID_INPUT``, raised
before anything is read. Authorisation (S2) is the caller's: tasks are read for the calling
principal only; a task's sessions and a session's turns are reached through a Task or Session
that was already authorised.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from functools import partial
from typing import Any, TypeVar

from turnqueue import domain
from turnqueue.engine.reads import Page, Reads, Window
from turnqueue.schema.connections import (
    Connection,
    Edge,
    PageArgs,
    PageInfo,
    invalid,
    page_count,
)
from turnqueue.schema.items import TurnItem, item_from_domain
from turnqueue.schema.sessions import Session, Task
from turnqueue.schema.turns import Turn

#: Items per page when neither ``first`` nor ``last`` is given; at most ``domain.MAX_PAGE`` in
#: any case.
DEFAULT_PAGE = 50
#: Longer than any cursor this module makes; ``turns.seq`` is a 32-bit column.
MAX_CURSOR = 200
MAX_SEQ = 2**31 - 1

K = TypeVar("K")
D = TypeVar("D")
N = TypeVar("N")


def encode_cursor(kind: str, *key: object) -> str:
    text = json.dumps([kind, *key], separators=(",", ":"))
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def _decode_parts(kind: str, cursor: str) -> list[Any]:
    if len(cursor) > MAX_CURSOR:
        raise ValueError("not a cursor")
    try:
        raw = base64.b64decode(cursor + "=" * (-len(cursor) % 4), altchars=b"-_", validate=True)
        parts = json.loads(raw.decode())
    # UnicodeDecodeError and JSONDecodeError are ValueErrors; RecursionError: "[[[[…" nesting
    except (binascii.Error, ValueError, RecursionError):
        raise ValueError("not a cursor") from None
    if not isinstance(parts, list) or not parts or parts[0] != kind:
        raise ValueError("a cursor of another connection")
    return parts[1:]


def timestamp_key(kind: str, cursor: str) -> tuple[datetime, str]:
    match _decode_parts(kind, cursor):
        case [str(stamp), str(item_id)] if domain.is_valid_id(item_id):
            at = datetime.fromisoformat(stamp)
            if at.tzinfo is None:
                raise ValueError("a cursor without a time zone")
            try:  # in UTC now: binding it later must not overflow (year 1 at +01:00)
                return at.astimezone(UTC), item_id
            except OverflowError:
                raise ValueError("a cursor out of range") from None
    raise ValueError("a malformed cursor")


def position_key(kind: str, cursor: str) -> int:
    match _decode_parts(kind, cursor):
        case [int(position)] if not isinstance(position, bool) and 0 <= position <= MAX_SEQ:
            return position
    raise ValueError("a malformed cursor")


def list_page(items: Sequence[D], w: Window[int]) -> Page[int, D]:
    """A page of an in-memory listing keyed by position (a turn's items: each keeps its
    place, new ones are appended), with ``pageInfo`` as the store's keyset pages have it."""
    start = 0 if w.after is None else w.after + 1
    stop = len(items) if w.before is None else min(w.before, len(items))
    inside = list(enumerate(items))[start : max(start, stop)]
    if w.first is not None:
        chosen = inside[: w.first]
        has_next = len(inside) > w.first
        has_previous = w.after is not None and bool(items) and w.after >= 0
    else:
        count = w.last or 0
        chosen = inside[len(inside) - count :] if count else []
        has_previous = len(inside) > count
        has_next = w.before is not None and w.before < len(items)
    return Page(items=chosen, has_previous=has_previous, has_next=has_next)


def window(args: PageArgs, key: Callable[[str], K]) -> Window[K]:
    """The page window for these arguments, or an INVALID_INPUT GraphQL error."""
    first, last = args.first, args.last
    if first is not None and last is not None:
        raise invalid("pass first or last, not both")
    first = None if first is None else page_count("first", first)
    last = None if last is None else page_count("last", last)
    if first is None and last is None:
        first = DEFAULT_PAGE
    bounds: dict[str, K | None] = {}
    for name, cursor in (("after", args.after), ("before", args.before)):
        try:
            bounds[name] = key(cursor) if cursor is not None else None
        except ValueError:
            raise invalid(f"{name} is not a cursor of this connection") from None
    return Window(first=first, last=last, after=bounds["after"], before=bounds["before"])


def build(page: Page[K, D], cursor: Callable[[K], str], node: Callable[[D], N]) -> Connection[N]:
    edges = [Edge(cursor=cursor(key), node=node(item)) for key, item in page.items]
    return Connection(
        edges=edges,
        page_info=PageInfo(
            has_next_page=page.has_next,
            has_previous_page=page.has_previous,
            start_cursor=edges[0].cursor if edges else None,
            end_cursor=edges[-1].cursor if edges else None,
        ),
    )


def _timestamp_cursor(kind: str) -> Callable[[tuple[datetime, str]], str]:
    return lambda key: encode_cursor(kind, key[0].isoformat(), key[1])


async def tasks(reads: Reads, owner: str, args: PageArgs) -> Connection[Task]:
    page = await reads.tasks_page(owner, window(args, partial(timestamp_key, "task")))
    return build(page, _timestamp_cursor("task"), Task.from_domain)


async def sessions(reads: Reads, task_id: str, args: PageArgs) -> Connection[Session]:
    page = await reads.sessions_page(task_id, window(args, partial(timestamp_key, "session")))
    return build(page, _timestamp_cursor("session"), Session.from_domain)


def items(listing: Sequence[domain.TurnItem], args: PageArgs) -> Connection[TurnItem]:
    page = list_page(list(enumerate(listing)), window(args, partial(position_key, "item")))
    return build(page, lambda index: encode_cursor("item", index), lambda p: item_from_domain(*p))


async def turns(reads: Reads, session_id: str, args: PageArgs) -> Connection[Turn]:
    page = await reads.turns_page(session_id, window(args, partial(position_key, "turn")))
    return build(page, lambda seq: encode_cursor("turn", seq), Turn.from_domain)
