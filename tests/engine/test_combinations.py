"""Where two features meet: Send Now × a refusal, Send Now × a workflow transfer, a turn end ×
a database that will not commit, cancel × a turn whose agent is gone, cancel × a W2 step change.

Each race is driven as real concurrent tasks whose order the test fixes through the engine's own
locks and events (never by sleeping): a waiter queued on an ``asyncio.Lock`` is woken in FIFO
order, so queueing tasks on the session lock in turn fixes the order they act in.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from engine_helpers import PRINCIPAL, WAIT, ManualAgent, new_session, next_event, settle
from engine_probes import clarification
from faults import faults_of
from revision_ledger import Ledger
from sqlalchemy.engine import make_url
from test_queue_rules import busy_session, enqueue

from turnqueue.agents import AgentResult
from turnqueue.bus import EventKind
from turnqueue.domain import MessageSource, PauseReason, SendNowScope, SessionState, TurnStatus
from turnqueue.engine import Engine
from turnqueue.errors import ErrorCode, StoreError, UserFacingError
from turnqueue.settings import Settings
from turnqueue.store.tx import SqlTx
from turnqueue.timeouts import within

WORKFLOW = """
[[steps]]
name = "WORK"
on_turn_complete = "NONE"
cancel_triggers_turn_complete = false

[[steps]]
name = "HANDOFF"
new_session_on_enter = true

[[steps]]
name = "DONE"
"""

CANCEL_MOVES = """
[[steps]]
name = "PLAN"
on_turn_complete = "MOVE_TO_NEXT"
cancel_triggers_turn_complete = true

[[steps]]
name = "BUILD"
new_session_on_enter = true

[[steps]]
name = "DONE"
"""


async def waiting_on(lock: asyncio.Lock, count: int) -> None:
    """Until ``count`` tasks wait on ``lock`` (bounded; asyncio wakes them in FIFO order)."""
    async with asyncio.timeout(WAIT):
        # No event tells that a task has queued on a lock: look at its waiters each step.
        while len(getattr(lock, "_waiters", None) or ()) < count:  # noqa: ASYNC110
            await asyncio.sleep(0)


async def with_workflow(open_engine: Any, settings: Settings, path: Path, text: str) -> Engine:
    await asyncio.to_thread(path.write_text, text)
    return await open_engine(settings.model_copy(update={"workflow_file": path}))  # type: ignore[no-any-return]


# -- Q5: a refusal changes nothing --------------------------------------------------------------
async def test_q5_refused_send_now_keeps_order_policy_and_pause_reason(
    engine: Engine, agent: ManualAgent
) -> None:
    """Q5: a Send Now answered TURN_CHANGED (the active turn ended and a sendMessage started
    another while the Send Now waited) leaves [A,B,C,D] in that order, auto-run OFF with reason
    CANCEL — not C moved to the head and the reason rewritten to USER."""
    sid, _ = await busy_session(engine, agent)
    ids = await enqueue(engine, sid, "A", "B", "C", "D")
    await engine.cancel(PRINCIPAL, sid)  # Q7 parks the backlog: OFF, reason CANCEL
    await engine.send_message(PRINCIPAL, sid, "second")
    second = await agent.next_run()
    parked = await engine.queue_status(sid)
    assert (parked.auto_run, parked.pause_reason) == (False, PauseReason.CANCEL)

    lock = engine.core.session_lock(sid)
    async with lock:  # the turn's end, a sendMessage and a sendNow arrive in this order
        second.complete()
        await waiting_on(lock, 1)
        message = asyncio.create_task(engine.send_message(PRINCIPAL, sid, "third"))
        await waiting_on(lock, 2)
        send_now = asyncio.create_task(
            engine.send_now(PRINCIPAL, sid, SendNowScope.ENTRY, ids[2], None)
        )
        await waiting_on(lock, 3)
    assert (await message).turn is not None  # "third" started: the turn Send Now saw is gone
    with pytest.raises(UserFacingError) as info:
        await send_now
    assert (info.value.code, info.value.message) == (
        ErrorCode.TURN_CHANGED,
        "the active turn changed meanwhile",
    )
    after = await engine.queue_status(sid)
    assert [e.id for e in after.entries] == ids
    assert (after.auto_run, after.pause_reason) == (False, PauseReason.CANCEL)
    assert after.revision == (await engine.queue_status(sid)).revision
    run = await agent.next_run()
    assert run.prompt == "third" and agent.no_new_run()


# -- Q7 × W3: a cancel pending while the task moves --------------------------------------------
async def test_q7_w3_a_task_moved_while_a_cancel_is_pending_keeps_the_backlog_parked(
    tmp_path: Path, engine_settings: Settings, open_engine: Any, agent: ManualAgent
) -> None:
    """Q7, Q9, W3: a user cancels a stubborn turn with A queued; while the cancel is pending
    the task enters a step with ``new_session_on_enter``. The accepted cancel parks the
    backlog wherever it goes: the new session holds A paused (TRANSFER, as when the cancel
    itself moves the task, W2) and nothing runs (it used to run A at once)."""
    flow = await with_workflow(open_engine, engine_settings, tmp_path / "w.toml", WORKFLOW)
    task, session = await new_session(flow)
    await flow.send_message(PRINCIPAL, session.id, "/stubborn")
    stubborn = await agent.next_run()
    await enqueue(flow, session.id, "A")
    cancel = asyncio.create_task(flow.cancel(PRINCIPAL, session.id))
    await within(stubborn.signalled.wait(), WAIT)  # accepted: the stop is under way
    moved, destination = await flow.move_task(PRINCIPAL, task.id, "HANDOFF")
    await within(cancel, WAIT)
    await settle(flow, destination.id)
    assert moved.current_session_id == destination.id
    status = await flow.queue_status(destination.id)
    assert [e.content for e in status.entries] == ["A"]
    assert (status.auto_run, status.pause_reason) == (False, PauseReason.TRANSFER)
    assert agent.no_new_run()
    assert [t.prompt for t in await flow.turns_of(destination.id, 5)] == []


async def test_q7_w3_a_task_moved_on_another_instance_while_a_cancel_is_pending_stays_parked(
    database_url: str,
    tmp_path: Path,
    engine_settings: Settings,
    open_engine: Any,
    agent: ManualAgent,
) -> None:
    """Q7, W3, M4: A runs a stubborn turn with A queued and a user's cancel stopping it; B (the
    other instance) moves the task into a step with a new session meanwhile, without waiting
    for A's stop. The accepted cancel still parks the backlog: the new session holds the
    entry paused (TRANSFER) and nothing runs anywhere (B used to start it at once)."""
    if not database_url.startswith("postgresql"):
        pytest.skip("several instances share a database only on PostgreSQL (M4)")
    path = tmp_path / "w.toml"
    await asyncio.to_thread(path.write_text, WORKFLOW)
    flow = engine_settings.model_copy(update={"workflow_file": path, "cancel_timeout": 60})
    a = await open_engine(flow)
    agent_b = ManualAgent()
    b = await open_engine(flow, agent_b)
    task, session = await new_session(a)
    await a.send_message(PRINCIPAL, session.id, "/stubborn")
    stubborn = await agent.next_run()
    await enqueue(a, session.id, "A")
    cancel = asyncio.create_task(a.cancel(PRINCIPAL, session.id))
    await within(stubborn.signalled.wait(), WAIT)  # accepted: the stop is under way
    moved, destination = await b.move_task(PRINCIPAL, task.id, "HANDOFF")
    assert moved.current_session_id == destination.id
    status = await b.queue_status(destination.id)
    assert [e.content for e in status.entries] == ["A"]
    assert (status.auto_run, status.pause_reason) == (False, PauseReason.TRANSFER)
    stubborn.finish(AgentResult(ok=False, error="stopped at last"))
    await within(cancel, WAIT)
    await settle(a, session.id)
    assert agent.no_new_run() and agent_b.no_new_run()
    assert (await a.queue_status(destination.id)).entries == status.entries


# -- W3 × Q5: one entry runs once ---------------------------------------------------------------
async def test_w3_q10_send_now_claim_moved_by_a_transfer_runs_once_on_the_destination(
    tmp_path: Path, engine_settings: Settings, open_engine: Any, agent: ManualAgent
) -> None:
    """W3: Send Now claims B and waits out a stubborn turn; meanwhile the task enters a step
    with ``new_session_on_enter``. The transfer commits first, so B runs exactly once, at the
    head of the new session; the Send Now answers QUEUE_CHANGED and the old session stays
    COMPLETED with no turn running (it used to run B there too)."""
    flow = await with_workflow(open_engine, engine_settings, tmp_path / "w.toml", WORKFLOW)
    task, session = await new_session(flow)
    await flow.send_message(PRINCIPAL, session.id, "/stubborn")
    stubborn = await agent.next_run()
    entry, _, _ = await flow.enqueue(PRINCIPAL, session.id, "B", None)
    await flow.enqueue(PRINCIPAL, session.id, "C", None)

    moved = asyncio.Event()
    held: list[bool] = []

    async def deliver_after_the_move() -> None:  # the stopped turn's end committed
        await moved.wait()  # the transfer's commit comes first
        held.append(True)

    def transferred(event: Any) -> None:  # the source's queue, emptied by the transfer
        if event.queue is not None and not event.queue.entries:
            moved.set()

    watch = flow.bus.watch(session.id, [EventKind.QUEUE], transferred)
    with faults_of(flow).after_commit("end_turn", deliver_after_the_move):
        send_now = asyncio.create_task(
            flow.send_now(PRINCIPAL, session.id, SendNowScope.ENTRY, entry.id, None)
        )
        await within(stubborn.signalled.wait(), WAIT)  # the replacement is stopping it
        moved_task, destination = await flow.move_task(PRINCIPAL, task.id, "HANDOFF")
        with pytest.raises(UserFacingError) as info:
            await send_now
    watch.close()
    assert held, "the delivery did not wait behind the stopped turn's end"
    assert (info.value.code, info.value.message) == (
        ErrorCode.QUEUE_CHANGED,
        "the entry moved to the task's new session with a workflow step change",
    )

    b = await agent.next_run()
    assert (b.prompt, b.session_id) == ("B", destination.id)
    await settle(flow, session.id)
    assert agent.no_new_run()
    old = await flow.session(PRINCIPAL, session.id)
    assert old is not None and old.state is SessionState.COMPLETED
    assert [t.prompt for t in await flow.turns_of(session.id, 10)] == ["/stubborn"]
    assert [e.content for e in (await flow.queue_status(destination.id)).entries] == ["C"]
    assert moved_task.current_session_id == destination.id


async def test_w3_send_now_delivered_before_a_transfer_runs_once_on_the_source(
    tmp_path: Path, engine_settings: Settings, open_engine: Any, agent: ManualAgent
) -> None:
    """W3, the other order: B's turn started on the source before the transfer, so B ran
    there (the transfer stops it) and is not run again on the destination."""
    flow = await with_workflow(open_engine, engine_settings, tmp_path / "w.toml", WORKFLOW)
    task, session = await new_session(flow)
    await flow.send_message(PRINCIPAL, session.id, "first")
    await agent.next_run()
    entry, _, _ = await flow.enqueue(PRINCIPAL, session.id, "B", None)
    result = await flow.send_now(PRINCIPAL, session.id, SendNowScope.ENTRY, entry.id, None)
    assert result.turn is not None
    b = await agent.next_run()
    assert (b.prompt, b.session_id) == ("B", session.id)
    _, destination = await flow.move_task(PRINCIPAL, task.id, "HANDOFF")
    await settle(flow, destination.id)
    assert agent.no_new_run()
    assert (await flow.queue_status(destination.id)).entries == ()
    assert [t.prompt for t in await flow.turns_of(session.id, 10)] == ["first", "B"]


# -- Q10 / M6: a turn end that cannot commit ----------------------------------------------------
async def test_q10_m6_turn_end_that_fails_to_commit_is_retried_and_the_queue_runs_on(
    engine: Engine, agent: ManualAgent, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Q10, M6: the first attempts to record a turn's end fail (the database is away); the
    end is retried until it commits — the turn COMPLETED, the session free, the next entry
    started — instead of leaving the session RUNNING with no agent until a restart."""
    sid, first = await busy_session(engine, agent)
    await enqueue(engine, sid, "second")
    failures = 3
    end_turn = SqlTx.end_turn

    async def flaky(self: SqlTx, *args: Any, **kwargs: Any) -> Any:
        nonlocal failures
        if failures:
            failures -= 1
            raise StoreError("the database is away")
        return await end_turn(self, *args, **kwargs)

    monkeypatch.setattr(SqlTx, "end_turn", flaky)
    first.complete()
    second = await agent.next_run()
    assert second.prompt == "second" and failures == 0
    turns = await engine.turns_of(sid, 10)
    assert [(t.prompt, t.status) for t in turns] == [
        ("first", TurnStatus.COMPLETED),
        ("second", TurnStatus.RUNNING),
    ]


async def test_q10_q7_outside_writer_past_the_timeout_then_cancel_parks_and_drains(
    database_url: str,
    engine_settings: Settings,
    open_engine: Any,
    agent: ManualAgent,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Q10, Q7 on SQLite: another process holds the write lock past ``db_timeout`` when a turn
    ends. While the end cannot commit the session stays busy (prompts queue); once the lock is
    released the end commits and the queue runs on. An explicit cancel sent meanwhile is a
    cancel like any other: afterwards the backlog is parked (CANCEL), nothing starts."""
    if not database_url.startswith("sqlite"):
        pytest.skip("an outside writer holding the lock is SQLite's fault (the PG half injects)")
    engine = await open_engine(engine_settings.model_copy(update={"db_timeout": 0.2}))
    sid, first = await busy_session(engine, agent)
    await enqueue(engine, sid, "second")
    other = sqlite3.connect(make_url(database_url).database or "", isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")  # the other process's write lock
        with caplog.at_level(logging.ERROR, logger="turnqueue.engine.turns"):
            first.complete()
            async with asyncio.timeout(WAIT):
                # The log is what tells an attempt failed (no event for it): look each step.
                while "could not record the end" not in caplog.text:  # noqa: ASYNC110
                    await asyncio.sleep(0.01)
        status = await engine.queue_status(sid)  # readers go on meanwhile
        assert [e.content for e in status.entries] == ["second"]
        assert sid in engine.core.runners  # still busy: the end has not committed
    finally:
        other.execute("ROLLBACK")
        other.close()
    second = await agent.next_run()
    assert second.prompt == "second"
    await enqueue(engine, sid, "third")
    outcome = await engine.cancel(PRINCIPAL, sid)
    assert outcome.outcome.value in {"STOPPED", "ESCALATED"}
    await settle(engine, sid)
    parked = await engine.queue_status(sid)
    assert (parked.auto_run, parked.pause_reason) == (False, PauseReason.CANCEL)
    assert [e.content for e in parked.entries] == ["third"] and agent.no_new_run()


# -- C5 × Q7: a turn whose agent is gone --------------------------------------------------------
async def test_c5_q7_cancel_of_a_turn_whose_agent_is_gone_parks_the_backlog(
    engine: Engine, agent: ManualAgent
) -> None:
    """C5, Q7: a RUNNING turn with no agent behind it (none in this process, no live owner)
    is ended CANCELLED by an explicit cancel, which also parks the backlog (reason CANCEL)
    before its reference is released, and pending goes true then false (C1)."""
    _, session = await new_session(engine)
    sid = session.id
    await engine.set_auto_run(PRINCIPAL, sid, False, None)
    await enqueue(engine, sid, "A", "B")
    async with engine.core.store.transaction() as tx:  # a turn no agent runs
        await tx.lock(sid)
        ghost = await tx.start_turn(
            sid, prompt="ghost", source=MessageSource.USER, owner=engine.core.instance
        )
    await engine.set_auto_run(PRINCIPAL, sid, True, None)  # held: the session is busy
    with engine.bus.subscribe(sid, [EventKind.CANCELLATION]) as sub:
        result = await engine.cancel(PRINCIPAL, sid)
        flags = [(await next_event(sub, EventKind.CANCELLATION)).cancellation.pending for _ in "ab"]  # type: ignore[attr-defined]
    assert flags == [True, False]
    assert result.outcome.value == "STOPPED" and not result.cancellation.pending
    turn = await engine.current_turn(sid)
    assert turn is not None and (turn.id, turn.status) == (ghost.id, TurnStatus.CANCELLED)
    status = await engine.queue_status(sid)
    assert (status.auto_run, status.pause_reason) == (False, PauseReason.CANCEL)
    assert [e.content for e in status.entries] == ["A", "B"] and agent.no_new_run()


# -- W2: the cancel's step change is atomic with the cancel -------------------------------------
async def test_w2_prompt_arriving_as_the_cancel_ends_does_not_start_on_the_step_being_left(
    tmp_path: Path, engine_settings: Settings, open_engine: Any, agent: ManualAgent
) -> None:
    """W2 × enqueueMessage: a user's cancel on a step whose cancel completes the turn moves
    the task; another client's enqueueMessage arriving the moment the cancellation ends must
    not start a turn on the step being left (the step change holds the queue from before the
    cancellation clears). It runs once the move has committed: on the new session when it was
    queued before the transfer (it moved with the queue), or on the session it was sent to
    when that had already been completed by the transfer (a prompt reopens it, §1)."""
    flow = await with_workflow(open_engine, engine_settings, tmp_path / "w.toml", CANCEL_MOVES)
    task, session = await new_session(flow)
    await flow.send_message(PRINCIPAL, session.id, "plan it")
    await agent.next_run()
    with flow.bus.subscribe(session.id, [EventKind.CANCELLATION]) as sub:
        cancel = asyncio.create_task(flow.cancel(PRINCIPAL, session.id))
        while (await next_event(sub, EventKind.CANCELLATION)).cancellation.pending:  # type: ignore[attr-defined]
            pass
        await flow.enqueue(PRINCIPAL, session.id, "late", None)  # as pending turns false
        await cancel
    run = await agent.next_run()
    moved = await flow.task(PRINCIPAL, task.id)
    assert moved is not None and moved.workflow_step == "BUILD"
    assert moved.current_session_id is not None
    destination = await flow.session(PRINCIPAL, moved.current_session_id)
    assert destination is not None and run.prompt == "late"
    source_turns = await flow.turns_of(session.id, 10)
    if run.session_id == destination.id:
        assert [t.prompt for t in source_turns] == ["plan it"]
    else:  # sent after the transfer: it reopened the completed source, after the move
        assert run.session_id == session.id
        assert [t.prompt for t in source_turns] == ["plan it", "late"]
        assert source_turns[1].started_at > destination.created_at
    assert agent.no_new_run()


# -- Q13 × Q9: one revision, one heldBy ---------------------------------------------------------
async def test_r3_q13_one_queue_revision_is_one_status_through_cancels_and_send_nows(
    open_engine: Any, engine_settings: Settings, agent: ManualAgent
) -> None:
    """R3, Q13, Q9: while cancels and Send Nows hold and release a session's queue (its holds
    changing), every status read at one revision — by queries polled throughout, and carried
    by the queue events — is the same status, holds included; so is every cancellation
    status at one cancellation revision."""
    engine = await open_engine(engine_settings.model_copy(update={"cancel_timeout": 0.2}))
    ledger = Ledger()
    sid, run = await busy_session(engine, agent)

    def heard(event: Any) -> None:
        if event.queue is not None:
            ledger.see("queue", sid, event.queue.revision, event.queue, "event")
        if event.cancellation is not None:
            c = event.cancellation
            ledger.see("cancellation", sid, c.revision, c.pending, "event")

    done = asyncio.Event()

    async def poll() -> None:
        while not done.is_set():
            status = await engine.queue_status(sid)
            ledger.see("queue", sid, status.revision, status, "query")
            c = await engine.cancellation(sid)
            ledger.see("cancellation", sid, c.revision, c.pending, "query")

    watch = engine.bus.watch(sid, [EventKind.QUEUE, EventKind.CANCELLATION], heard)
    pollers = [asyncio.create_task(poll()) for _ in range(2)]
    try:
        for round_ in range(3):
            await enqueue(engine, sid, f"a{round_}", f"b{round_}")
            run.complete()  # "first", then each Send Now's turn, ends: a0 starts
            await settle(engine, sid)
            run = await agent.next_run()
            stubborn = await engine.send_message(PRINCIPAL, sid, "/stubborn")
            assert stubborn.entry is not None
            await asyncio.gather(
                engine.cancel(PRINCIPAL, sid),  # parks b and /stubborn (Q7)
                engine.set_auto_run(PRINCIPAL, sid, True, None),
                return_exceptions=True,
            )
            await settle(engine, sid)
            queue = await engine.queue_status(sid)
            if queue.entries:
                await engine.send_now(
                    PRINCIPAL, sid, SendNowScope.ENTRY, queue.entries[-1].id, None
                )
            run = await agent.next_run()
            await engine.clear_queue(PRINCIPAL, sid, None)
    finally:
        done.set()
        await asyncio.gather(*pollers)
        watch.close()
    assert ledger.count > 100
    ledger.check()


# -- C9 × Q9: a cancel with nothing running -----------------------------------------------------
async def test_c9_cancel_with_nothing_running_changes_no_revision(
    engine: Engine, agent: ManualAgent
) -> None:
    """C9: with no turn and no clarification a cancel is a no-op: NOTHING_RUNNING, no queue
    revision, no session event."""
    _, session = await new_session(engine)
    before = await engine.queue_status(session.id)
    with engine.bus.subscribe(session.id, [EventKind.SESSION, EventKind.QUEUE]) as sub:
        result = await engine.cancel(PRINCIPAL, session.id)
        with pytest.raises(TimeoutError):
            await next_event(sub, EventKind.SESSION, timeout=0.2)  # nothing is published
    assert result.outcome.value == "NOTHING_RUNNING"
    assert await engine.queue_status(session.id) == before


async def test_c9_q9_withdrawn_clarification_is_published_and_the_queue_runs_on(
    engine: Engine, agent: ManualAgent
) -> None:
    """C9, Q9: a cancel with a pending clarification withdraws it (a session event and a
    queue revision are published) and the auto-run queue it held starts its head."""
    sid, run = await busy_session(engine, agent)
    await enqueue(engine, sid, "next")
    run.complete(clarification="which one?")
    await settle(engine, sid)
    held = await engine.queue_status(sid)
    with engine.bus.subscribe(sid, [EventKind.SESSION]) as sub:
        result = await engine.cancel(PRINCIPAL, sid)
        event = await next_event(sub, EventKind.SESSION)
    assert result.outcome.value == "NOTHING_RUNNING" and event.session_id == sid  # type: ignore[attr-defined]
    assert await clarification(engine, sid) is None
    assert (await agent.next_run()).prompt == "next"
    assert (await engine.queue_status(sid)).revision > held.revision


async def test_c5_agent_gone_end_is_recorded_and_published(engine: Engine) -> None:
    """C5: the turn whose agent is gone ends CANCELLED with error "agent gone" and no
    output, and its session event is published."""
    _, session = await new_session(engine)
    sid = session.id
    async with engine.core.store.transaction() as tx:
        await tx.lock(sid)
        await tx.start_turn(sid, prompt="ghost", source=MessageSource.USER, owner=1)
    with engine.bus.subscribe(sid, [EventKind.SESSION]) as sub:
        await engine.cancel(PRINCIPAL, sid)
        event = await next_event(sub, EventKind.SESSION)
    assert event.session_id == sid  # type: ignore[attr-defined]
    turn = await engine.current_turn(sid)
    assert turn is not None and (turn.status, turn.error, turn.output) == (
        TurnStatus.CANCELLED,
        "agent gone",
        "",
    )
