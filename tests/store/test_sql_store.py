"""SqlStore / SqlTx on both backends (M3): every Tx and Store method, named by the rule it keeps."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import UTC
from types import MappingProxyType
from typing import Any

import pytest

from turnqueue.domain import (
    HoldReason,
    ItemKind,
    MessageSource,
    OutputRecord,
    PauseReason,
    SessionState,
    TurnStatus,
)
from turnqueue.errors import StoreError
from turnqueue.settings import Settings
from turnqueue.store import Store, Tx, Window
from turnqueue.store.sql import SqlStore, open_store
from turnqueue.timeouts import within

USER = MessageSource.USER


async def new_session(store: SqlStore, owner: str = "alice") -> str:
    async with store.transaction() as tx:
        task = await tx.create_task(title="t", owner=owner, workflow_step="IN_PROGRESS")
        session = await tx.create_session(
            task_id=task.id, agent="scripted", state=SessionState.WAITING_FOR_INPUT
        )
    return session.id


async def add(store: SqlStore, session_id: str, *contents: str) -> list[str]:
    async with store.transaction() as tx:
        return [(await tx.add_entry(session_id, content=c, source=USER)).id for c in contents]


async def visible(store: SqlStore, session_id: str) -> list[tuple[int, str]]:
    async with store.read() as tx:
        return [(e.position, e.content) for e in await tx.list_entries(session_id)]


#: A host no agent process is recorded on (``Tx.orphans`` reads its process groups).
HOST = "nowhere"


async def bump(tx: Any, session_id: str) -> int:
    """Q13: the queue revision this transaction commits."""
    return int(await tx.bump_queue(session_id))


async def in_flight_sessions(tx: Any) -> list[str]:
    """Sessions with in-flight entries (all of them orphans of an empty set of instances)."""
    return sorted((await tx.orphans([], host=HOST, grace=0)).entries)


def _protocol_methods(protocol: type) -> set[str]:
    return {name for name in vars(protocol) if not name.startswith("_")}


def test_sql_store_implements_every_protocol_method() -> None:
    from turnqueue.store.postgres import PostgresStore, PostgresTx
    from turnqueue.store.sqlite import SqliteStore, SqliteTx

    for tx in (SqliteTx, PostgresTx):
        assert _protocol_methods(Tx) - set(dir(tx)) == set()
    for backend in (SqliteStore, PostgresStore):
        assert _protocol_methods(Store) - set(dir(backend)) == set()
    _static_check: Callable[[SqlStore], Store] = lambda s: s  # noqa: E731 (mypy checks it)


async def test_create_task_and_session(store: SqlStore) -> None:
    async with store.transaction() as tx:
        task = await tx.create_task(title="Fix it", owner="alice", workflow_step="IN_PROGRESS")
        session = await tx.create_session(
            task_id=task.id, agent="scripted", state=SessionState.CREATED
        )
        view = await tx.lock(session.id)
    assert session.revision == 1 and session.owner == "alice"
    assert view.policy.revision == 0 and view.queued == 0 and view.running_turn_id is None
    assert session.created_at.tzinfo is not None
    async with store.read() as tx:
        stored_task = await tx.get_task(task.id)
        stored = await tx.get_session(session.id)
        assert await tx.get_session("00000000-0000-0000-0000-000000000000") is None
    assert stored_task is not None and stored_task.current_session_id == session.id
    assert stored == session
    assert stored.created_at.utcoffset() is not None
    assert stored.created_at.tzinfo is not None and stored.created_at.astimezone(UTC) == (
        session.created_at
    )
    assert (await store.tasks_page("alice", Window(first=10))).values() == [stored_task]
    assert (await store.tasks_page("bob", Window(first=10))).values() == []
    assert (await store.tasks([task.id]))[task.id].title == "Fix it"
    assert (await store.sessions([session.id]))[session.id].agent == "scripted"
    assert [s.id for s in (await store.sessions_of_tasks([task.id]))[task.id]] == [session.id]


async def test_set_task_step_moves_current_session(store: SqlStore) -> None:
    first = await new_session(store)
    async with store.transaction() as tx:
        task_id = (await tx.view(first)).session.task_id  # type: ignore[union-attr]
        second = await tx.create_session(
            task_id=task_id, agent="scripted", state=SessionState.CREATED
        )
        task = await tx.set_task_step(task_id, "REVIEW", second.id)
    assert task.workflow_step == "REVIEW" and task.current_session_id == second.id
    sessions = (await store.sessions_of_tasks([task_id]))[task_id]
    assert [s.id for s in sessions] == [first, second.id]


async def test_lock_and_view_of_unknown_session(store: SqlStore) -> None:
    with pytest.raises(KeyError):
        async with store.transaction() as tx:
            await tx.lock("00000000-0000-0000-0000-000000000000")
    async with store.read() as tx:
        assert await tx.view("00000000-0000-0000-0000-000000000000") is None


async def test_q1_view_with_policy_keeps_every_other_field(store: SqlStore) -> None:
    """``SessionView.with_policy`` (the hot path's copy) passes on every field but the
    policy: a field added to the view and forgotten there would fail here."""
    from dataclasses import fields, replace

    from turnqueue.domain import QueuePolicy

    sid = await new_session(store)
    async with store.read() as tx:
        view = await tx.view(sid)
    assert view is not None
    odd = {"str": "x", "int": 7, "bool": True}  # a non-default value for every field
    changes = {
        f.name: odd[next(k for k in odd if k in str(f.type))]
        for f in fields(view)
        if f.name not in ("session", "policy", "clarification")
    }
    view = replace(view, **changes)
    policy = QueuePolicy(sid, False, PauseReason.USER, 9)
    assert view.with_policy(policy) == replace(view, policy=policy)


async def test_q1_missing_policy_reads_auto_run_true(store: SqlStore) -> None:
    sid = await new_session(store)
    async with store.transaction() as tx:
        assert (await tx.lock(sid)).policy.auto_run is True
        await tx.set_policy(sid, auto_run=False, pause_reason=PauseReason.USER)
    async with store.read() as tx:
        policy = (await tx.view(sid)).policy  # type: ignore[union-attr]
    assert (policy.auto_run, policy.pause_reason) == (False, PauseReason.USER)
    async with store.transaction() as tx:  # upsert over the existing row
        await tx.set_policy(sid, auto_run=True, pause_reason=None)
        assert (await tx.lock(sid)).policy.auto_run is True
        await tx.set_policy(sid, auto_run=False, pause_reason=PauseReason.CANCEL)
        await tx.delete_policy(sid)
        assert (await tx.lock(sid)).policy.auto_run is True


async def test_q13_queue_revision_changes_only_through_bump(store: SqlStore) -> None:
    sid = await new_session(store)
    async with store.transaction() as tx:
        await tx.lock(sid)
        await tx.add_entry(sid, content="a", source=USER)
        await tx.set_policy(sid, auto_run=False, pause_reason=PauseReason.USER)
        assert (await tx.lock(sid)).policy.revision == 0
        assert await bump(tx, sid) == 1
    async with store.read() as tx:
        assert (await tx.view(sid)).policy.revision == 1  # type: ignore[union-attr]


async def test_q13_q14_set_policy_bumped_writes_the_policy_and_one_revision(
    store: SqlStore,
) -> None:
    """Q1, Q13, Q14: the policy and the queue revision in one step (one statement on
    PostgreSQL); a later bump in the same transaction shares that revision, and so does a
    second policy write."""
    sid = await new_session(store)
    async with store.transaction() as tx:
        await tx.lock(sid)
        assert await tx.set_policy_bumped(sid, auto_run=False, pause_reason=PauseReason.USER) == 1
        assert await bump(tx, sid) == 1
        assert await tx.set_policy_bumped(sid, auto_run=True, pause_reason=None) == 1
        assert tx.changed_queues() == [sid]
    async with store.read() as tx:
        policy = (await tx.view(sid)).policy  # type: ignore[union-attr]
    assert (policy.auto_run, policy.pause_reason, policy.revision) == (True, None, 1)
    async with store.transaction() as tx:
        await tx.lock(sid)
        assert await tx.set_policy_bumped(sid, auto_run=False, pause_reason=None) == 2
    with pytest.raises((KeyError, StoreError)):  # no lock row, or the policy's foreign key
        async with store.transaction() as tx:
            missing = "00000000-0000-0000-0000-000000000000"
            await tx.set_policy_bumped(missing, auto_run=False, pause_reason=None)


async def _queue_revision(store: SqlStore, sid: str) -> int:
    async with store.read() as tx:
        view = await tx.view(sid)
        assert view is not None
        return view.policy.revision


async def test_q13_r3_every_change_of_a_queue_status_commits_a_revision_of_its_own(
    store: SqlStore,
) -> None:
    """Q13, R3: whatever changes what a queue status shows — entries, the policy, the
    session's state, a clarification, a hold, an approval — gets the session a new queue
    revision in its own transaction, bumped or not by the caller; so no revision is ever read
    with two states. A transaction that changes none of it leaves the revision alone."""
    sid = await new_session(store)
    entry = (await add(store, sid, "a"))[0]
    turn_id: list[str] = []

    async def start(tx: Any) -> None:
        turn_id.append((await tx.start_turn(sid, prompt="p", source=USER)).id)

    async def end(tx: Any) -> None:
        await tx.end_turn(
            turn_id[0],
            status=TurnStatus.COMPLETED,
            output="",
            error=None,
            session_state=SessionState.WAITING_FOR_INPUT,
        )

    hold = HoldReason.CANCELLING
    changes = {
        "set_policy": lambda tx: tx.set_policy(sid, auto_run=False, pause_reason=None),
        "update_entry": lambda tx: tx.update_entry(entry, content="b"),
        "reorder": lambda tx: tx.reorder_entries(sid, [entry]),
        "reserve_head": lambda tx: tx.reserve_head(sid),
        "release": lambda tx: tx.release_entries(sid, None),
        "remove": lambda tx: tx.remove_entries(sid, [entry]),
        "add_entry": lambda tx: tx.add_entry(sid, content="c", source=USER),
        "clear_queue": lambda tx: tx.remove_entries(sid, None),
        "state": lambda tx: tx.set_session_state(sid, SessionState.STARTING),
        "state back": lambda tx: tx.set_session_state(sid, SessionState.WAITING_FOR_INPUT),
        "start_turn": start,
        "end_turn": end,
        "clarification": lambda tx: tx.set_clarification(sid, turn_id=None, question="q?"),
        "no clarification": lambda tx: tx.clear_clarification(sid),
        "hold": lambda tx: tx.change_hold(sid, 7, hold, 1),
        "unhold": lambda tx: tx.change_hold(sid, 7, hold, -1),
        "delete_policy": lambda tx: tx.delete_policy(sid),
    }
    for what, change in changes.items():
        before = await _queue_revision(store, sid)
        async with store.transaction() as tx:
            await change(tx)
            assert tx.changed_queues() == [sid], what
        assert await _queue_revision(store, sid) == before + 1, what
    before = await _queue_revision(store, sid)
    async with store.transaction() as tx:  # nothing a status shows
        await tx.set_cancel_mark(sid, None)
        await tx.remove_entries(sid, ["00000000-0000-0000-0000-000000000000"])
        await tx.touch_starting(sid)
        assert tx.changed_queues() == []
    assert await _queue_revision(store, sid) == before


async def test_q9_holds_are_counted_per_instance_and_orphans_are_dropped(
    store: SqlStore,
) -> None:
    """Q9, M6: a session holds a kind while any instance's count of it is above zero; the
    holds of instances that are not live are found and dropped (recovery)."""
    sid = await new_session(store)
    cancelling, moving = HoldReason.CANCELLING, HoldReason.WORKFLOW_TRANSITION

    async def view() -> tuple[bool, bool]:
        async with store.read() as tx:
            v = await tx.view(sid)
            assert v is not None
            return v.cancelling, v.transitioning

    async with store.transaction() as tx:
        await tx.change_hold(sid, 1, cancelling, 1)
        await tx.change_hold(sid, 1, cancelling, 1)
        await tx.change_hold(sid, 2, moving, 1)
    assert await view() == (True, True)
    async with store.transaction() as tx:
        await tx.change_hold(sid, 1, cancelling, -1)
    assert await view() == (True, True)  # one of instance 1's two still holds
    async with store.transaction() as tx:
        await tx.change_hold(sid, 1, cancelling, -1)
        assert (await tx.orphans({1}, host=HOST, grace=0)).holds == {sid}  # instance 2 is not live
        assert (await tx.orphans({1, 2}, host=HOST, grace=0)).holds == set()
        assert await tx.drop_orphaned_holds(sid, {1}) == 1
    assert await view() == (False, False)
    async with store.transaction() as tx:
        assert (await tx.orphans(set(), host=HOST, grace=0)).holds == set()


async def test_q13_queue_revision_survives_policy_delete(store: SqlStore) -> None:
    sid = await new_session(store)
    async with store.transaction() as tx:
        await tx.set_policy(sid, auto_run=False, pause_reason=PauseReason.TRANSFER)
        assert await bump(tx, sid) == 1
    async with store.transaction() as tx:
        await tx.delete_policy(sid)
        view = await tx.lock(sid)
        assert view.policy.revision == 1 and view.policy.auto_run is True
        assert await bump(tx, sid) == 2
    with pytest.raises(KeyError):
        async with store.transaction() as tx:
            await bump(tx, "00000000-0000-0000-0000-000000000000")


async def test_r1_session_revision_bumps_on_state_turns_and_clarification(
    store: SqlStore,
) -> None:
    sid = await new_session(store)
    async with store.transaction() as tx:
        session = await tx.set_session_state(sid, SessionState.WAITING_FOR_INPUT)
        assert session.revision == 2 and session.updated_at >= session.created_at
        assert await tx.clear_clarification(sid) is None  # nothing pending: no bump
        assert (await tx.lock(sid)).session.revision == 2
        turn = await tx.start_turn(sid, prompt="p", source=USER)
        assert (await tx.lock(sid)).session.revision == 3
        clar = await tx.set_clarification(sid, turn_id=turn.id, question="why?")
        assert (await tx.lock(sid)).session.revision == 4
        again = await tx.set_clarification(sid, turn_id=None, question="really?")
        view = await tx.lock(sid)
        assert view.session.revision == 5 and view.clarification is not None
        assert view.clarification.question == "really?" and view.clarification.id == again.id
        cleared = await tx.clear_clarification(sid)
        assert cleared is not None and cleared.id == again.id and cleared.id != clar.id
        view = await tx.lock(sid)
        assert view.session.revision == 6 and view.clarification is None


async def test_turn_lifecycle_and_idempotent_end(store: SqlStore) -> None:
    sid = await new_session(store)
    async with store.transaction() as tx:
        first = await tx.start_turn(sid, prompt="one", source=USER)
        view = await tx.lock(sid)
        assert view.session.state is SessionState.RUNNING
        assert view.running_turn_id == first.id
        assert (await tx.orphans([], host=HOST, grace=0)).turns == {sid: [first.id]}
        ended, session = await tx.end_turn(
            first.id,
            status=TurnStatus.COMPLETED,
            output="out",
            error=None,
            session_state=SessionState.WAITING_FOR_INPUT,
        )
        assert ended.status is TurnStatus.COMPLETED and ended.ended_at is not None
        assert session.state is SessionState.WAITING_FOR_INPUT
        # A second end changes nothing (no revision bump, status kept).
        again, same = await tx.end_turn(
            first.id,
            status=TurnStatus.FAILED,
            output="x",
            error="late",
            session_state=SessionState.FAILED,
        )
        assert again == ended and same == session
        second = await tx.start_turn(sid, prompt="two", source=MessageSource.AGENT)
    turns = (await store.turns_page(sid, Window(last=20))).values()
    assert [t.prompt for t in turns] == ["one", "two"]
    (current,) = (await store.turns_page(sid, Window(last=1))).values()
    assert current.id == second.id
    assert current.source is MessageSource.AGENT and current.started_at.tzinfo is not None
    async with store.read() as tx:
        stored = await tx.get_turn(first.id)
    assert stored is not None and stored.output == "out"


async def test_o2_next_turn_is_the_turn_that_started_after_one(store: SqlStore) -> None:
    """A stream that follows a session moves on turn after turn, in the order they started,
    whatever their status (issue 23, finding 2)."""
    sid, other = await new_session(store), await new_session(store)
    assert await store.next_turn(sid, None) is None
    started = []
    for prompt in ("one", "two", "three"):
        async with store.transaction() as tx:
            turn = await tx.start_turn(sid, prompt=prompt, source=USER)
            await tx.end_turn(
                turn.id,
                status=TurnStatus.COMPLETED,
                output=prompt,
                error=None,
                session_state=SessionState.WAITING_FOR_INPUT,
            )
            started.append(turn.id)
        async with store.transaction() as tx:
            theirs = await tx.start_turn(other, prompt=prompt, source=USER)  # not in the chain
            await tx.end_turn(
                theirs.id,
                status=TurnStatus.COMPLETED,
                output="",
                error=None,
                session_state=SessionState.WAITING_FOR_INPUT,
            )
    chain: list[str] = []
    after: str | None = None
    while (turn := await store.next_turn(sid, after)) is not None:
        chain.append(turn.id)
        after = turn.id
    assert chain == started
    second = await store.next_turn(sid, started[0])
    assert second is not None and second.id == started[1] and second.prompt == "two"
    assert await store.next_turn(sid, started[-1]) is None


async def test_o1_one_append_writes_every_running_turn_and_refuses_ended_ones(
    store: SqlStore,
) -> None:
    """O1: one ``append_output`` takes the records of several turns (a flush of every running
    turn): it writes those of RUNNING turns exactly (text, items with data and key, non-ASCII),
    writes nothing for a turn that has ended and names it, and an ended turn's log never grows."""
    sids = [await new_session(store) for _ in range(3)]
    async with store.transaction() as tx:
        turns = [await tx.start_turn(sid, prompt="p", source=USER) for sid in sids]
        await tx.end_turn(
            turns[1].id,
            status=TurnStatus.COMPLETED,
            output="",
            error=None,
            session_state=SessionState.WAITING_FOR_INPUT,
        )
    a, ended, c = (t.id for t in turns)
    data = {"title": 'édit \u2603 "q"', "n": [1, 2], "nested": {"ok": True}}
    batches = {
        a: [
            OutputRecord(a, 0, 0, ItemKind.MESSAGE, "héllo "),
            OutputRecord(a, 1, 6, ItemKind.TOOL_CALL, "", MappingProxyType(data), "tool-1"),
            OutputRecord(a, 2, 6, ItemKind.MESSAGE, "wörld"),
        ],
        ended: [OutputRecord(ended, 0, 0, ItemKind.MESSAGE, "late")],
        c: [OutputRecord(c, 0, 0, ItemKind.MESSAGE, "only")],
    }
    async with store.transaction() as tx:
        assert await tx.append_output(batches) == {ended}
        assert await tx.append_output({}) == set()
        assert await tx.append_output({a: []}) == set()  # no records: nothing to refuse
    async with store.read() as tx:
        assert await tx.read_records(a) == batches[a]
        assert await tx.read_records(c) == batches[c]
        assert await tx.read_records(ended) == []
        assert await tx.output_text(a) == "héllo wörld"
        assert [r.text for r in await tx.read_output(a, 7)] == ["wörld"]


async def test_o1_an_end_appends_its_last_batch_with_its_commit_and_only_then(
    store: SqlStore,
) -> None:
    """O1: a turn's end appends its last batch unchecked (``running=True``: it read the turn
    RUNNING under the lock row) in the end's own transaction. The records are written exactly
    (quotes, backslashes, newlines, non-ASCII, an item's data and key) when that transaction
    commits, in the same snapshot as the end; a rolled-back end writes none, and its retry
    writes them once."""
    sid = await new_session(store)
    async with store.transaction() as tx:
        turn = await tx.start_turn(sid, prompt="p", source=USER)
    tid = turn.id
    data = {"path": "C:\\tmp\\it's", "quote": "E'x'; --", "n": [1, None]}
    rest = [
        OutputRecord(tid, 0, 0, ItemKind.MESSAGE, "it's \\ a 'quote'\n\u2603 "),
        OutputRecord(tid, 1, 17, ItemKind.TOOL_CALL, "", MappingProxyType(data), "k'1"),
        OutputRecord(tid, 2, 17, ItemKind.MESSAGE, "$$ end $$"),
    ]

    async def end(tx: Tx) -> None:
        assert await tx.append_output({tid: rest}, running=True) == set()
        await tx.end_turn(
            tid,
            status=TurnStatus.COMPLETED,
            output="",
            error=None,
            session_state=SessionState.WAITING_FOR_INPUT,
        )

    with pytest.raises(RuntimeError):
        async with store.transaction() as tx:
            await end(tx)
            raise RuntimeError("the end's transaction fails")
    async with store.read() as tx:
        assert await tx.read_records(tid) == []
        running = await tx.get_turn(tid)
        assert running is not None and running.status is TurnStatus.RUNNING
    async with store.transaction() as tx:
        await end(tx)
    async with store.read() as tx:
        assert await tx.read_records(tid) == rest
        ended = await tx.get_turn(tid)
        assert ended is not None and ended.status is TurnStatus.COMPLETED


async def test_q3_reserve_head_is_fifo_and_hides_in_flight(store: SqlStore) -> None:
    sid = await new_session(store)
    ids = await add(store, sid, "a", "b", "c")
    async with store.transaction() as tx:
        await tx.lock(sid)
        head = await tx.reserve_head(sid)
        assert head is not None and (head.id, head.position, head.content) == (ids[0], 1, "a")
        assert [(e.position, e.content) for e in await tx.list_entries(sid)] == [
            (1, "b"),
            (2, "c"),
        ]
        assert (await tx.lock(sid)).queued == 2
        assert (await tx.reserve_head(sid)).content == "b"  # type: ignore[union-attr]
        assert (await tx.reserve_head(sid)).content == "c"  # type: ignore[union-attr]
        assert await tx.reserve_head(sid) is None
        assert await in_flight_sessions(tx) == [sid]


async def test_q12_update_remove_reorder(store: SqlStore) -> None:
    sid = await new_session(store)
    a, b, c, d = await add(store, sid, "a", "b", "c", "d")
    async with store.transaction() as tx:
        updated = await tx.update_entry(c, content="c2")
        assert (updated.position, updated.content) == (3, "c2")
        await tx.reorder_entries(sid, [d, c, b, a])
        assert [e.content for e in await tx.list_entries(sid)] == ["d", "c2", "b", "a"]
        assert await tx.remove_entries(sid, [b, "00000000-0000-0000-0000-000000000000"]) == 1
        await tx.reserve_head(sid)  # d goes in flight: untouchable below
        with pytest.raises(KeyError):
            await tx.update_entry(d, content="nope")
        assert await tx.remove_entries(sid, None) == 2
        assert await tx.list_entries(sid) == []
        assert await tx.release_entries(sid, None) == 1  # d survived the clear
        assert [e.id for e in await tx.list_entries(sid)] == [d]


async def test_q5_claim_entries_is_exact(store: SqlStore) -> None:
    sid = await new_session(store)
    a, b, c = await add(store, sid, "a", "b", "c")
    missing = "00000000-0000-0000-0000-000000000000"
    async with store.transaction() as tx:
        claimed = await tx.claim_entries(sid, [c, missing])
        assert [(e.id, e.position) for e in claimed] == [(c, 3)]
        assert [e.id for e in await tx.list_entries(sid)] == [a, b]
        assert await tx.claim_entries(sid, [c]) == []  # already in flight
        assert [e.id for e in await tx.claim_entries(sid, [b, a])] == [a, b]  # FIFO order
        assert await tx.list_entries(sid) == []


async def test_q10_release_returns_entries_to_head_with_ids(store: SqlStore) -> None:
    sid = await new_session(store)
    a, b, c, d = await add(store, sid, "a", "b", "c", "d")
    async with store.transaction() as tx:
        await tx.reserve_head(sid)  # a
        await tx.claim_entries(sid, [c])
        e = (await tx.add_entry(sid, content="e", source=USER)).id
    assert await visible(store, sid) == [(1, "b"), (2, "d"), (3, "e")]
    async with store.transaction() as tx:
        assert await tx.release_entries(sid, [c]) == 1
        assert [x.id for x in await tx.list_entries(sid)] == [c, b, d, e]
        assert await tx.release_entries(sid, None) == 1
    async with store.read() as tx:
        entries = await tx.list_entries(sid)
    assert [x.id for x in entries] == [a, c, b, d, e]
    assert [x.position for x in entries] == [1, 2, 3, 4, 5]
    async with store.transaction() as tx:  # repeated release below 1 keeps working
        await tx.claim_entries(sid, [d, e])
        assert await tx.release_entries(sid, None) == 2
        assert [x.content for x in await tx.list_entries(sid)] == ["d", "e", "a", "c", "b"]
        assert await tx.release_entries(sid, None) == 0


async def test_q10_release_into_an_empty_queue_then_append(store: SqlStore) -> None:
    sid = await new_session(store)
    a, b = await add(store, sid, "a", "b")
    async with store.transaction() as tx:
        await tx.claim_entries(sid, [a, b])
        assert await tx.release_entries(sid, None) == 2
        await tx.add_entry(sid, content="c", source=USER)
    assert await visible(store, sid) == [(1, "a"), (2, "b"), (3, "c")]


async def test_q10_start_turn_consumes_in_flight_entries_in_same_transaction(
    store: SqlStore,
) -> None:
    sid = await new_session(store)
    a, b = await add(store, sid, "a", "b")
    async with store.transaction() as tx:
        head = await tx.reserve_head(sid)
    assert head is not None
    async with store.read() as tx:
        assert await in_flight_sessions(tx) == [sid]
    async with store.transaction() as tx:
        # b is visible, not in flight: naming it must not delete it.
        turn = await tx.start_turn(sid, prompt=head.content, source=head.source, consume=[a, b])
        assert await in_flight_sessions(tx) == []
        assert [x.id for x in await tx.list_entries(sid)] == [b]
        assert (await tx.lock(sid)).running_turn_id == turn.id


async def test_q10_failed_start_turn_keeps_the_entry(store: SqlStore) -> None:
    sid = await new_session(store)
    (a,) = await add(store, sid, "a")
    async with store.transaction() as tx:
        await tx.reserve_head(sid)
    with pytest.raises(RuntimeError):
        async with store.transaction() as tx:
            await tx.start_turn(sid, prompt="a", source=USER, consume=[a])
            raise RuntimeError("delivery failed")
    async with store.transaction() as tx:
        assert await in_flight_sessions(tx) == [sid]
        assert await tx.release_entries(sid, None) == 1
    assert await visible(store, sid) == [(1, "a")]


async def test_rollback_on_exception_leaves_nothing_and_runs_no_callback(
    store: SqlStore,
) -> None:
    called: list[str] = []
    with pytest.raises(ValueError, match="boom"):
        async with store.transaction() as tx:
            task = await tx.create_task(title="x", owner="alice", workflow_step="IN_PROGRESS")
            tx.after_commit(lambda: called.append("cb"))
            raise ValueError("boom")
    assert called == []
    assert (await store.tasks_page("alice", Window(first=10))).values() == []
    assert await store.tasks([task.id]) == {}


async def test_after_commit_runs_after_commit_in_order(
    store: SqlStore, caplog: pytest.LogCaptureFixture
) -> None:
    sid = await new_session(store)
    seen: list[object] = []

    async def async_callback() -> None:
        # Runs after COMMIT and after the writer lock is released: a new transaction works
        # and sees the committed row.
        async with store.transaction() as tx2:
            seen.append([e.content for e in await tx2.list_entries(sid)])

    def failing() -> None:
        raise RuntimeError("callback failed")

    async with store.transaction() as tx:
        await tx.add_entry(sid, content="a", source=USER)
        tx.after_commit(lambda: seen.append("first"))
        tx.after_commit(failing)
        tx.after_commit(async_callback)
        assert seen == []
    assert seen == ["first", ["a"]]
    assert "callback failed" in caplog.text or any(
        r.levelno >= logging.ERROR for r in caplog.records
    )


async def test_database_errors_become_store_error(store: SqlStore) -> None:
    with pytest.raises(StoreError):
        async with store.transaction() as tx:  # foreign keys are enforced on both backends
            await tx.add_entry("00000000-0000-0000-0000-000000000000", content="x", source=USER)


async def test_r2_epoch_strictly_increases(store: SqlStore) -> None:
    values = []
    for _ in range(3):
        async with store.transaction() as tx:
            values.append(await tx.next_epoch())
    assert values == sorted(values) and len(set(values)) == 3


async def test_r2_epoch_increases_across_reopen(database_url: str) -> None:
    first = await open_store(Settings(database_url=database_url))
    async with first.transaction() as tx:
        before = await tx.next_epoch()
    await first.close()
    second = await open_store(Settings(database_url=database_url))
    try:
        async with second.transaction() as tx:
            after = await tx.next_epoch()
    finally:
        await second.close()
    assert after > before


async def test_w3_move_entries_appends_in_order(store: SqlStore) -> None:
    src = await new_session(store)
    dst = await new_session(store)
    await add(store, dst, "x")
    a, b, c = await add(store, src, "a", "b", "c")
    async with store.transaction() as tx:
        await tx.claim_entries(src, [b])  # in flight while the transfer happens
        assert await tx.move_entries(src, dst) == 3
        assert await tx.move_entries(src, dst) == 0
        assert await tx.list_entries(src) == []
        moved = await tx.list_entries(dst)
        assert [e.content for e in moved] == ["x", "a", "c"]
        assert [e.id for e in moved[1:]] == [a, c]
        # The in-flight entry followed the queue: released by id it returns to its new head.
        assert await tx.release_entries(src, [b]) == 1
    assert await visible(store, dst) == [(1, "b"), (2, "x"), (3, "a"), (4, "c")]


async def test_q13_one_queue_revision_per_transaction(store: SqlStore) -> None:
    """Q13: a turn's end and the drain it starts change the queue in one commit; they share one
    revision (no snapshot can show the state between them), and the next commit gets the next."""
    sid = await new_session(store)
    async with store.transaction() as tx:
        first = await bump(tx, sid)
        assert await bump(tx, sid) == first
    async with store.transaction() as tx:
        assert await bump(tx, sid) == first + 1
        view = await tx.view(sid)
        assert view is not None and view.policy.revision == first + 1


async def test_q3_lock_serialises_writers(store: SqlStore) -> None:
    """A second locker waits for the first transaction and then sees its committed policy."""
    sid = await new_session(store)
    order: list[str] = []
    first_locked = asyncio.Event()

    async def first() -> None:
        async with store.transaction() as tx:
            await tx.lock(sid)
            first_locked.set()
            await asyncio.sleep(0.2)
            await tx.set_policy(sid, auto_run=False, pause_reason=PauseReason.USER)
            order.append("first-commit")

    async def second() -> bool:
        await first_locked.wait()
        async with store.transaction() as tx:
            view = await tx.lock(sid)
            order.append("second-locked")
            return view.policy.auto_run

    _, auto_run = await asyncio.gather(first(), second())
    assert order == ["first-commit", "second-locked"]
    assert auto_run is False


async def test_concurrent_write_transactions_all_succeed(store: SqlStore) -> None:
    """20 concurrent writers on one session (SQLite: no "database is locked")."""
    sid = await new_session(store)

    async def writer(i: int) -> int:
        async with store.transaction() as tx:
            await tx.lock(sid)
            await tx.add_entry(sid, content=f"m{i}", source=USER)
            return await bump(tx, sid)

    revisions = await asyncio.gather(*(writer(i) for i in range(20)))
    assert sorted(revisions) == list(range(1, 21))
    entries = await visible(store, sid)
    assert [p for p, _ in entries] == list(range(1, 21))
    assert sorted(c for _, c in entries) == sorted(f"m{i}" for i in range(20))


async def test_reads_do_not_wait_for_an_open_write_transaction(store: SqlStore) -> None:
    """WAL on SQLite, MVCC on PostgreSQL: a read during a write sees the last commit only."""
    sid = await new_session(store)
    await add(store, sid, "committed")
    async with store.transaction() as tx:
        await tx.lock(sid)
        await tx.add_entry(sid, content="uncommitted", source=USER)
        seen = await within(visible(store, sid), timeout=5)
        turns = await within(store.turns_page(sid, Window(last=1)), timeout=5)
    assert seen == [(1, "committed")]
    assert turns.items == []
    assert await visible(store, sid) == [(1, "committed"), (2, "uncommitted")]


async def test_m6_stuck_sessions_spare_a_session_that_is_still_starting(store: SqlStore) -> None:
    """A STARTING session is normal while an instance prepares it; only one older than the
    grace period (a lease) counts as stuck. RUNNING without a RUNNING turn is always stuck."""
    async with store.transaction() as tx:
        task = await tx.create_task(title="t", owner="alice", workflow_step="A")
        starting = await tx.create_session(task_id=task.id, agent="x", state=SessionState.STARTING)
        running = await tx.create_session(task_id=task.id, agent="x", state=SessionState.RUNNING)
        busy = await tx.create_session(
            task_id=task.id, agent="x", state=SessionState.WAITING_FOR_INPUT
        )
        await tx.start_turn(busy.id, prompt="p", source=MessageSource.USER)
    async with store.read() as tx:
        assert (await tx.orphans([], host=HOST, grace=60.0)).stuck == {running.id}
        assert (await tx.orphans([], host=HOST, grace=0.0)).stuck == {running.id, starting.id}


async def _assert_counted(tx: Tx, *session_ids: str) -> None:
    """The view's ``queued`` (the lock row's trigger-kept counter) equals the visible entries."""
    for sid in session_ids:
        view = await tx.view(sid)
        assert view is not None
        assert view.queued == len(await tx.list_entries(sid)), sid


async def test_p6_queued_counter_follows_every_entry_change(store: SqlStore) -> None:
    """``SessionView.queued`` is read from a counter (bench P6), not counted: every way an entry
    appears, goes in flight, returns, moves or disappears keeps it exact (Q10, Q11, W3)."""
    src, dst = await new_session(store), await new_session(store)
    a, b, c, d, e = await add(store, src, "a", "b", "c", "d", "e")
    await add(store, dst, "x")
    async with store.transaction() as tx:
        await _assert_counted(tx, src, dst)
        assert (await tx.lock(src)).queued == 5
        head = await tx.reserve_head(src)  # a in flight
        await tx.claim_entries(src, [c, d])
        await _assert_counted(tx, src)
        await tx.update_entry(b, content="b2")
        await tx.reorder_entries(src, [e, b])
        await _assert_counted(tx, src)
        assert head is not None
        await tx.start_turn(src, prompt=head.content, source=USER, consume=[a])
        await tx.release_entries(src, [c])
        await _assert_counted(tx, src)
        assert await tx.move_entries(src, dst) == 4  # b, c, e visible and d in flight
        await _assert_counted(tx, src, dst)
        assert (await tx.lock(dst)).queued == 4
        await tx.release_entries(src, [d])  # by id: d returns to its new queue
        await tx.remove_entries(dst, [b])
        await _assert_counted(tx, src, dst)
        assert await tx.remove_entries(dst, None) == 4
        await _assert_counted(tx, src, dst)
        await tx.add_entry(dst, content="y", source=USER)
    with pytest.raises(RuntimeError):
        async with store.transaction() as tx:
            await tx.add_entry(dst, content="rolled back", source=USER)
            await tx.reserve_head(dst)
            raise RuntimeError("roll back")
    async with store.read() as tx:
        await _assert_counted(tx, src, dst)
        assert (await tx.view(dst)).queued == 1  # type: ignore[union-attr]


async def test_p6_queued_counter_counts_rows_written_outside_the_store(
    store: SqlStore, database_url: str
) -> None:
    """The counter is kept by the database (triggers), so a seed script or an operator's bulk
    INSERT/UPDATE/DELETE cannot make it drift."""
    from sqlalchemy import delete, insert, update

    from turnqueue.domain import utcnow
    from turnqueue.store.drivers import create_engine_for_url
    from turnqueue.store.tables import queue_entries as qe

    sid, other = await new_session(store), await new_session(store)
    now = utcnow()
    rows = [
        {
            "id": f"{sid[:8]}-bulk-{i}",
            "session_id": sid,
            "position": i,
            "content": f"m{i}",
            "source": "USER",
            "queued_at": now,
            "in_flight": i % 4 == 0,
        }
        for i in range(1, 41)
    ]
    engine = create_engine_for_url(database_url)  # an operator's own connection
    async with engine.begin() as conn:
        await conn.execute(insert(qe), rows)
    async with store.read() as tx:
        await _assert_counted(tx, sid)
        assert (await tx.view(sid)).queued == 30  # type: ignore[union-attr]
    async with engine.begin() as conn:
        await conn.execute(insert(qe).from_select(list(rows[0]), _copy_of(qe, sid, other)))
        await conn.execute(update(qe).where(qe.c.session_id == sid).values(in_flight=False))
        await conn.execute(delete(qe).where(qe.c.session_id == other, qe.c.position > 30))
    await engine.dispose()
    async with store.read() as tx:
        await _assert_counted(tx, sid, other)
        assert [(await tx.view(s)).queued for s in (sid, other)] == [40, 23]  # type: ignore[union-attr]


def _copy_of(qe: Any, source: str, destination: str) -> Any:
    """SELECT of the source's entries as new entries of the destination (one INSERT … SELECT)."""
    from sqlalchemy import literal, select

    return select(
        literal(destination[:8] + "-copy-") + qe.c.id,
        literal(destination),
        qe.c.position,
        qe.c.content,
        qe.c.source,
        qe.c.queued_at,
        qe.c.in_flight,
    ).where(qe.c.session_id == source)


async def test_a_cancelled_writer_leaves_nothing_and_blocks_nobody(store: SqlStore) -> None:
    """A task cancelled at any point of a write transaction (PostgreSQL: possibly while a
    statement is on the wire) is rolled back, and the next writer runs."""
    sid = await new_session(store)
    (kept,) = await add(store, sid, "kept")
    async with store.read() as tx:
        view = await tx.view(sid)
        assert view is not None
        revision = view.policy.revision  # the add's (Q13)

    async def doomed(i: int) -> None:
        async with store.transaction() as tx:
            await tx.lock(sid)
            await tx.add_entry(sid, content=f"doomed {i}", source=USER)
            await tx.reserve_head(sid)
            await bump(tx, sid)
            await asyncio.sleep(30)

    for yields in range(8):  # cancelled after 0, 1, 2, … turns of the event loop
        task = asyncio.create_task(doomed(yields))
        for _ in range(yields):
            await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert await visible(store, sid) == [(1, "kept")]
    async with store.transaction() as tx:
        view = await tx.lock(sid)
        assert (view.policy.revision, view.queued) == (revision, 1)
        assert await in_flight_sessions(tx) == []
        await tx.add_entry(sid, content="next", source=USER)
    assert await visible(store, sid) == [(1, "kept"), (2, "next")]
    assert kept


async def test_a_failed_statement_rolls_back_and_the_writer_goes_on(store: SqlStore) -> None:
    sid = await new_session(store)
    with pytest.raises(StoreError):
        async with store.transaction() as tx:
            await tx.add_entry(sid, content="before the error", source=USER)
            await tx.add_entry("00000000-0000-0000-0000-000000000000", content="x", source=USER)
    await add(store, sid, "after")
    assert await visible(store, sid) == [(1, "after")]


def _sqlite_path(database_url: str) -> str:
    from sqlalchemy.engine import make_url

    path = make_url(database_url).database
    assert path
    return path


async def test_sqlite_write_waits_for_another_process_without_blocking_the_loop(
    database_url: str,
) -> None:
    """SQLite writes run on the event loop: while another connection (another process, e.g.
    ``turnqueue migrate``) holds the write lock, a write transaction waits for it without
    blocking the loop, then commits; after ``close`` a write raises StoreError."""
    if not database_url.startswith("sqlite"):
        pytest.skip("SQLite only")
    import sqlite3

    store = await open_store(Settings(database_url=database_url))
    try:
        sid = await new_session(store)
        other = sqlite3.connect(_sqlite_path(database_url), isolation_level=None)
        other.execute("BEGIN IMMEDIATE")  # the other process's write lock
        waiting = asyncio.create_task(add(store, sid, "after the other writer"))
        ticks = 0
        while ticks < 20:  # the loop keeps running while the write waits
            await asyncio.sleep(0.005)
            ticks += 1
        assert not waiting.done()
        other.execute("ROLLBACK")
        other.close()
        await within(waiting, 10)
        assert await visible(store, sid) == [(1, "after the other writer")]
    finally:
        await store.close()
    with pytest.raises(StoreError):
        async with store.transaction() as tx:
            await tx.lock(sid)


async def test_sqlite_read_transactions_beyond_a_connection_pools_size_all_run(
    database_url: str,
) -> None:
    """SQLite reads run on the event loop, each on a connection of its own while its body
    suspends: as many as ``SqliteConnections.MOST`` run at once (more than SQLAlchemy's default
    pool of 5 + 10, whose limit, reached on the loop, blocked the whole server for its 30 s
    timeout), the rest wait for a free one without blocking the loop, and all finish."""
    if not database_url.startswith("sqlite"):
        pytest.skip("SQLite only")
    from turnqueue.store.sqlite_conn import SqliteConnections

    store = await open_store(Settings(database_url=database_url))
    most, inside = SqliteConnections.MOST, 0
    full, go = asyncio.Event(), asyncio.Event()
    try:
        sid = await new_session(store)

        async def reader() -> int:
            nonlocal inside
            async with store.read() as tx:
                inside += 1
                if inside == most:
                    full.set()
                await go.wait()  # the body suspends, holding its connection
                return len(await tx.list_entries(sid))

        readers = [asyncio.create_task(reader()) for _ in range(most + 8)]
        await within(full.wait(), 10)
        await add(store, sid, "written while they read")  # the writer is not starved either
        assert inside == most  # the other eight wait for a connection
        go.set()
        assert await within(asyncio.gather(*readers), 10) == [0] * most + [1] * 8
    finally:
        go.set()
        await store.close()


async def test_sqlite_writer_gives_up_after_the_timeout_and_changes_nothing(
    database_url: str,
) -> None:
    if not database_url.startswith("sqlite"):
        pytest.skip("SQLite only")
    import sqlite3

    store = await open_store(Settings(database_url=database_url, db_timeout=0.2))
    try:
        sid = await new_session(store)
        other = sqlite3.connect(_sqlite_path(database_url), isolation_level=None)
        other.execute("BEGIN IMMEDIATE")
        try:
            with pytest.raises(StoreError, match="locked"):
                await add(store, sid, "never")
        finally:
            other.execute("ROLLBACK")
            other.close()
        assert await visible(store, sid) == []
        await add(store, sid, "now")
        assert await visible(store, sid) == [(1, "now")]
    finally:
        await store.close()


class _BusyFile:
    """A ``sqlite3`` connection stand-in whose BEGIN IMMEDIATE, or the read that takes a read's
    snapshot, answers BUSY ``times`` times."""

    def __init__(self, times: int, code: int) -> None:
        self.times = times
        self.code = code
        self.in_transaction = False
        self.statements: list[str] = []

    def execute(self, sql: str) -> _BusyFile:
        import sqlite3

        self.statements.append(sql)
        if sql == "ROLLBACK":
            self.in_transaction = False
        elif sql != "BEGIN" and self.times > 0:
            self.times -= 1
            error = sqlite3.OperationalError("database is locked")
            error.sqlite_errorcode = self.code
            raise error
        elif sql.startswith("BEGIN"):
            self.in_transaction = True
        return self

    def fetchall(self) -> list[object]:
        return []


@pytest.mark.parametrize(("kind", "rollbacks"), [("READ", 4), ("WRITE", 0)])
async def test_sqlite_a_transaction_waits_for_a_busy_file_without_blocking_the_loop(
    kind: str, rollbacks: int
) -> None:
    """SQLite statements run on the event loop: when SQLite answers BUSY as a transaction
    begins (another process holding the file: a write's BEGIN IMMEDIATE, a read's snapshot), it
    waits with ``asyncio.sleep`` (the loop goes on), rolls back a read's open transaction
    between attempts, and gives up after the store's timeout; any other error is raised at
    once."""
    import sqlite3

    from turnqueue.store import sqlite_conn as module

    statements = getattr(module, kind)
    busy = _BusyFile(times=4, code=sqlite3.SQLITE_BUSY)
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0)
            ticks += 1

    ticking = asyncio.create_task(tick())
    try:
        await module.begin(busy, statements, timeout=5)  # type: ignore[arg-type]
    finally:
        ticking.cancel()
    assert busy.in_transaction and ticks >= 4
    assert busy.statements.count("ROLLBACK") == rollbacks
    assert busy.statements.count(statements[0]) == 5
    with pytest.raises(sqlite3.OperationalError):
        await module.begin(  # type: ignore[arg-type]
            _BusyFile(times=1000, code=sqlite3.SQLITE_BUSY), statements, timeout=0.05
        )
    corrupt = _BusyFile(times=1, code=sqlite3.SQLITE_CORRUPT)
    with pytest.raises(sqlite3.OperationalError):
        await module.begin(corrupt, statements, timeout=5)  # type: ignore[arg-type]
    assert corrupt.statements.count(statements[0]) == 1


async def test_sqlite_read_transactions_in_flight_together_each_have_their_own_snapshot(
    database_url: str,
) -> None:
    """Two read transactions open at once (one suspended inside) each read their own WAL
    snapshot on their own connection; the connections are kept for the next reads."""
    if not database_url.startswith("sqlite"):
        pytest.skip("SQLite only")
    store = await open_store(Settings(database_url=database_url))
    try:
        sid = await new_session(store)
        await add(store, sid, "one")
        inside = asyncio.Event()
        go_on = asyncio.Event()

        async def slow_reader() -> list[tuple[int, str]]:
            async with store.read() as tx:
                first = [(e.position, e.content) for e in await tx.list_entries(sid)]
                inside.set()
                await go_on.wait()  # a write commits meanwhile: this snapshot keeps "one" only
                again = [(e.position, e.content) for e in await tx.list_entries(sid)]
                assert again == first
                return first

        slow = asyncio.create_task(slow_reader())
        await inside.wait()
        await add(store, sid, "two")
        assert await visible(store, sid) == [(1, "one"), (2, "two")]  # a second connection
        go_on.set()
        assert await slow == [(1, "one")]
        conns = store._conns  # type: ignore[attr-defined]
        assert len(conns._open) == 3 and len(conns._idle) == 2  # the writer and two readers
        for _ in range(5):
            await visible(store, sid)
        assert len(conns._open) == 3  # kept, not opened again
    finally:
        await store.close()


async def test_a_task_writing_in_a_loop_does_not_starve_the_others(store: SqlStore) -> None:
    """Statements never suspend on SQLite (they run on the loop), so each write transaction
    yields once: a task writing back to back still lets another task run in between."""
    sid = await new_session(store)

    async def write() -> None:
        for i in range(20):
            await add(store, sid, f"m{i}")

    writing = asyncio.create_task(write())
    ticks = 0
    while not writing.done():
        await asyncio.sleep(0)
        ticks += 1
    await writing
    assert ticks >= 20  # at least once per write transaction


async def test_m4_notifications_are_sent_at_commit_in_order_and_never_on_rollback(
    pg_database_url: str,
) -> None:
    """M4: a transaction's notifications (one statement for all of them) reach a listener at
    COMMIT, in the order they were added; a rolled-back transaction sends none."""
    import asyncpg

    from turnqueue.store.notify import CHANNEL, asyncpg_dsn

    heard: asyncio.Queue[str] = asyncio.Queue()
    listener = await asyncpg.connect(asyncpg_dsn(pg_database_url))
    await listener.add_listener(CHANNEL, lambda *args: heard.put_nowait(args[-1]))
    store = await open_store(Settings(database_url=pg_database_url))
    try:
        with pytest.raises(RuntimeError):
            async with store.transaction() as tx:
                tx.notify("rolled back")
                raise RuntimeError("abort")
        async with store.transaction() as tx:
            for payload in ("first", "second", "third"):
                tx.notify(payload)
            assert heard.empty()  # nothing before COMMIT
        received = [await within(heard.get(), 10) for _ in range(3)]
        assert received == ["first", "second", "third"]
        async with store.transaction() as tx:
            tx.notify("marker")
        assert await within(heard.get(), 10) == "marker"  # nothing from the rollback
    finally:
        await store.close()
        await listener.close()


async def test_m4_literals_of_the_folded_queries_reach_postgresql_verbatim(
    pg_database_url: str,
) -> None:
    """The lock row (with BEGIN) and the NOTIFYs (with COMMIT) are simple queries, their values
    quoted as literals (``turnqueue.store.postgres_conn.literal``): payloads with quotes,
    backslashes and non-ASCII text arrive as sent, in order; a session id written to break out
    of its literal finds no row; a transaction that sends nothing, and one rolled back after its
    lock, leave the connection usable."""
    import asyncpg

    from turnqueue.store.notify import CHANNEL, asyncpg_dsn
    from turnqueue.store.postgres_conn import literal

    heard: asyncio.Queue[str] = asyncio.Queue()
    listener = await asyncpg.connect(asyncpg_dsn(pg_database_url))
    await listener.add_listener(CHANNEL, lambda *args: heard.put_nowait(args[-1]))
    store = await open_store(Settings(database_url=pg_database_url, db_pool_size=1))
    tricky = ["it's", "back\\slash", "\\'; SELECT 1; --", "ünïcode ✓", "E'x''", "", "{}"]
    try:
        for conforming in ("on", "off"):  # an escape string reads the same either way
            await listener.execute(f"SET standard_conforming_strings = {conforming}")
            for value in tricky:
                assert await listener.fetchval(f"SELECT {literal(value)}") == value
        with pytest.raises(ValueError):
            literal("nul\x00")
        sid = await new_session(store)
        async with store.transaction() as tx:
            for payload in tricky:
                tx.notify(payload)
        assert [await within(heard.get(), 10) for _ in tricky] == tricky
        for wrong in ("x' OR true --", "x\\' OR true --", sid + "'"):
            with pytest.raises(KeyError):
                async with store.transaction() as tx:
                    await tx.lock(wrong)
        async with store.transaction():
            pass  # nothing sent: no BEGIN, no COMMIT
        with pytest.raises(RuntimeError):
            async with store.transaction() as tx:
                await tx.lock(sid)
                raise RuntimeError("abort")
        async with store.transaction() as tx:
            assert (await tx.lock(sid)).session.id == sid
            tx.notify("after")
        assert await within(heard.get(), 10) == "after"
    finally:
        await store.close()
        await listener.close()


async def test_q3_a_lock_wait_cancelled_in_flight_rolls_back_cleanly(pg_database_url: str) -> None:
    """Q3: a transaction cancelled while its lock row (sent with its BEGIN) waits for another
    holder raises CancelledError, is rolled back by the store itself (the pool finds no open
    transaction to reset and reports nothing to the loop's exception handler), and the session
    locks again once the holder commits."""
    import asyncpg

    from turnqueue.store.notify import asyncpg_dsn

    loop = asyncio.get_running_loop()
    reported: list[str] = []
    previous = loop.get_exception_handler()
    loop.set_exception_handler(lambda _, context: reported.append(str(context.get("message"))))
    watcher = await asyncpg.connect(asyncpg_dsn(pg_database_url))
    store = await open_store(Settings(database_url=pg_database_url, db_pool_size=2))
    try:
        sid = await new_session(store)
        held, release = asyncio.Event(), asyncio.Event()

        async def holder() -> None:
            async with store.transaction() as tx:
                await tx.lock(sid)
                held.set()
                await release.wait()

        async def waiter() -> None:
            async with store.transaction() as tx:
                await tx.lock(sid)

        holding = asyncio.create_task(holder())
        await within(held.wait(), 10)
        waiting = asyncio.create_task(waiter())
        lock_waits = (
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE datname = current_database() AND wait_event_type = 'Lock'"
        )
        for _ in range(1000):  # until PostgreSQL shows the waiter blocked on the lock row
            if await watcher.fetchval(lock_waits):
                break
            await asyncio.sleep(0.01)
        else:
            pytest.fail("the waiter never waited for the lock row")
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        release.set()
        await within(holding, 10)
        for _ in range(2):  # both pooled connections: neither is left in a transaction
            async with store.transaction() as tx:
                assert (await tx.lock(sid)).session.id == sid
        assert not [m for m in reported if "active transaction" in m]
    finally:
        loop.set_exception_handler(previous)
        await store.close()
        await watcher.close()


async def test_m4_an_owner_request_is_claimed_or_withdrawn_exactly_once(store: SqlStore) -> None:
    """M4: of the owner claiming a request and its requester withdrawing it, one wins; a request
    runs at most once, and only its owner lists it while it is PENDING."""
    from turnqueue.domain import RequestState as S

    async with store.transaction() as tx:
        first = await tx.add_request(7, 8, "cancel", '{"s": "x"}')
        second = await tx.add_request(7, 8, "send_now", "{}")
    async with store.read() as tx:
        assert await tx.pending_requests(7) == [first, second]
        assert await tx.pending_requests(8) == []
    async with store.transaction() as tx:
        assert await tx.move_request(first, S.PENDING, S.RUNNING)  # the owner claims it
        assert not await tx.move_request(first, S.PENDING, S.WITHDRAWN)  # too late
        assert not await tx.move_request(first, S.PENDING, S.RUNNING)  # never twice
        assert await tx.move_request(second, S.PENDING, S.WITHDRAWN)  # withdrawn first
        assert not await tx.move_request(second, S.PENDING, S.RUNNING)  # never runs
        assert await tx.move_request(first, S.RUNNING, S.DONE, '{"r": {}}')
    async with store.read() as tx:
        done = await tx.owner_request(first)
        assert await tx.pending_requests(7) == []
        assert await tx.owner_request("no-such-request") is None
    assert done is not None
    assert (done.owner, done.origin, done.op, done.args) == (7, 8, "cancel", '{"s": "x"}')
    assert (done.state, done.outcome) == (S.DONE, '{"r": {}}')
