"""G3 keyset pages in the store, on both backends (M3): order, bounds, pageInfo, S2 and inserts.

Every page is read in the database (``LIMIT n + 1`` after a key comparison); these tests walk
whole listings page by page in both directions and insert rows between the reads.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from turnqueue.domain import MessageSource, SessionState, TurnStatus
from turnqueue.store.protocol import Page, Window
from turnqueue.store.sql import SqlStore

USER = MessageSource.USER


async def new_tasks(store: SqlStore, owner: str, n: int) -> list[str]:
    ids = []
    for i in range(n):
        async with store.transaction() as tx:
            ids.append(
                (await tx.create_task(title=f"{owner}{i}", owner=owner, workflow_step="S")).id
            )
    return ids


async def new_turns(store: SqlStore, session_id: str, n: int, start: int = 0) -> list[str]:
    prompts = []
    for i in range(start, start + n):
        async with store.transaction() as tx:
            turn = await tx.start_turn(session_id, prompt=f"p{i}", source=USER)
            await tx.end_turn(
                turn.id,
                status=TurnStatus.COMPLETED,
                output="",
                error=None,
                session_state=SessionState.WAITING_FOR_INPUT,
            )
        prompts.append(f"p{i}")
    return prompts


async def new_session(store: SqlStore) -> str:
    async with store.transaction() as tx:
        task = await tx.create_task(title="t", owner="alice", workflow_step="S")
        session = await tx.create_session(
            task_id=task.id, agent="scripted", state=SessionState.WAITING_FOR_INPUT
        )
    return session.id


def ids(page: Page[Any, Any]) -> list[str]:
    return [item.id for _, item in page.items]


async def walk_forward(read: Any, size: int) -> list[Any]:
    """Every item by ``first: size`` pages after the last key; asserts pageInfo on the way."""
    seen: list[Any] = []
    after = None
    while True:
        page = await read(Window(first=size, after=after))
        assert page.has_previous == (after is not None)
        seen.extend(item for _, item in page.items)
        if not page.has_next:
            return seen
        after = page.items[-1][0]


async def walk_backward(read: Any, size: int) -> list[Any]:
    seen: list[Any] = []
    before = None
    while True:
        page = await read(Window(last=size, before=before))
        assert page.has_next == (before is not None)
        seen[:0] = [item for _, item in page.items]
        if not page.has_previous:
            return seen
        before = page.items[0][0]


async def test_g3_tasks_page_newest_first_whole_walk_both_ways(store: SqlStore) -> None:
    created = await new_tasks(store, "alice", 7)
    await new_tasks(store, "bob", 3)

    async def read(window: Window[Any]) -> Page[Any, Any]:
        return await store.tasks_page("alice", window)

    newest_first = list(reversed(created))
    for size in (1, 2, 3, 7, 10):
        assert [t.id for t in await walk_forward(read, size)] == newest_first, size
        assert [t.id for t in await walk_backward(read, size)] == newest_first, size


async def test_g3_s2_tasks_page_of_another_owner_never_shows(store: SqlStore) -> None:
    await new_tasks(store, "alice", 3)
    bob = await new_tasks(store, "bob", 2)
    page = await store.tasks_page("bob", Window(first=50))
    assert sorted(ids(page)) == sorted(bob)
    assert (await store.tasks_page("carol", Window(first=50))).items == []


async def test_g3_window_between_two_keys_and_pageinfo(store: SqlStore) -> None:
    sid = await new_session(store)
    await new_turns(store, sid, 6)
    everything = await store.turns_page(sid, Window(first=200))
    keys = [k for k, _ in everything.items]
    assert [t.prompt for _, t in everything.items] == [f"p{i}" for i in range(6)]
    assert (everything.has_previous, everything.has_next) == (False, False)
    # Strictly between the second and the fifth turn: p2, p3.
    middle = await store.turns_page(sid, Window(first=10, after=keys[1], before=keys[4]))
    assert [t.prompt for _, t in middle.items] == ["p2", "p3"]
    assert (middle.has_previous, middle.has_next) == (True, False)
    last_two = await store.turns_page(sid, Window(last=2, before=keys[4]))
    assert [t.prompt for _, t in last_two.items] == ["p2", "p3"]
    assert (last_two.has_previous, last_two.has_next) == (True, True)
    empty = await store.turns_page(sid, Window(first=0))
    assert (empty.items, empty.has_next, empty.has_previous) == ([], True, False)


async def test_g3_pages_are_capped_at_200(store: SqlStore) -> None:
    sid = await new_session(store)
    async with store.transaction() as tx:
        for i in range(205):
            await tx.start_turn(sid, prompt=f"p{i}", source=USER)
    page = await store.turns_page(sid, Window(first=10_000))
    assert len(page.items) == 200 and page.has_next
    page = await store.turns_page(sid, Window(last=10_000))
    assert len(page.items) == 200 and page.has_previous
    assert page.items[-1][1].prompt == "p204"


async def test_g3_keys_stay_valid_while_rows_are_inserted_between_reads(store: SqlStore) -> None:
    """No gap, no duplicate: a walk forward over tasks while new tasks arrive (they are newer, so
    they land before the walk's start), and over turns while new turns are appended."""
    created = await new_tasks(store, "alice", 5)
    first = await store.tasks_page("alice", Window(first=2))
    await new_tasks(store, "alice", 3)  # newest: before the page already read
    seen = ids(first)
    after = first.items[-1][0]
    while True:
        page = await store.tasks_page("alice", Window(first=2, after=after))
        seen += ids(page)
        await new_tasks(store, "alice", 1)
        if not page.has_next:
            break
        after = page.items[-1][0]
    assert seen == list(reversed(created))

    sid = await new_session(store)
    await new_turns(store, sid, 3)
    page = await store.turns_page(sid, Window(first=2))
    prompts = [t.prompt for _, t in page.items]
    await new_turns(store, sid, 3, start=3)
    while page.has_next:
        page = await store.turns_page(sid, Window(first=2, after=page.items[-1][0]))
        prompts += [t.prompt for _, t in page.items]
    assert prompts == [f"p{i}" for i in range(6)]


async def test_g3_sessions_page_oldest_first_with_equal_timestamps(store: SqlStore) -> None:
    """Sessions created in the same microsecond are still ordered (by id) and none is lost."""
    async with store.transaction() as tx:
        task = await tx.create_task(title="t", owner="alice", workflow_step="S")
        made = [
            await tx.create_session(task_id=task.id, agent="a", state=SessionState.CREATED)
            for _ in range(5)
        ]
    expected = [s.id for s in sorted(made, key=lambda s: (s.created_at, s.id))]

    async def read(window: Window[Any]) -> Page[Any, Any]:
        return await store.sessions_page(task.id, window)

    for size in (1, 2, 5):
        assert [s.id for s in await walk_forward(read, size)] == expected
        assert [s.id for s in await walk_backward(read, size)] == expected
    # A key that matches no row (before every session) bounds nothing out.
    key = (made[0].created_at - timedelta(days=1), "")
    assert ids(await store.sessions_page(task.id, Window(first=5, after=key))) == expected
