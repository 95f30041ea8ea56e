"""Cancellation rules C1–C9 and revisions R1/R2 at the engine level."""

from __future__ import annotations

import asyncio

import pytest
from engine_helpers import PRINCIPAL, WAIT, ManualAgent, new_session, next_event, settle
from engine_probes import add_hold, clarification
from faults import faults_of

from turnqueue.agents import Signal
from turnqueue.bus import Event, EventKind
from turnqueue.domain import (
    CancelKind,
    CancellationStatus,
    CancelOutcome,
    HoldReason,
    PauseReason,
    SendNowScope,
    TurnStatus,
)
from turnqueue.engine import Engine
from turnqueue.errors import ErrorCode, StoreError, UserFacingError
from turnqueue.timeouts import within


async def busy(engine: Engine, agent: ManualAgent, prompt: str = "work"):  # type: ignore[no-untyped-def]
    _, session = await new_session(engine)
    await engine.send_message(PRINCIPAL, session.id, prompt)
    return session.id, await agent.next_run()


async def test_c1_c2_pending_sets_on_the_first_reference_and_clears_on_the_last_only(
    engine: Engine,
) -> None:
    """C1, C2: references of every kind count together: the first sets ``pending`` and the last
    clears it, each transition with a revision of its own (and only those); a session never
    cancelled reads (false, 0)."""
    _, session = await new_session(engine)
    sid = session.id
    assert await engine.cancellation(sid) == CancellationStatus(sid, False, 0)
    with engine.bus.subscribe(sid, [EventKind.CANCELLATION]) as sub:
        async with engine.core.hold(sid, CancelKind.EXPLICIT):
            async with engine.core.hold(sid, CancelKind.REPLACEMENT):
                assert await engine.cancellation(sid) == CancellationStatus(sid, True, 1)
            assert await engine.cancellation(sid) == CancellationStatus(sid, True, 1)
        events = [await next_event(sub, EventKind.CANCELLATION) for _ in range(2)]
        assert sub.pending() == 0  # exactly one pair
    assert [(e.cancellation.pending, e.revision) for e in events] == [(True, 1), (False, 2)]  # type: ignore[attr-defined]
    assert await engine.cancellation(sid) == CancellationStatus(sid, False, 2)


async def test_c5_a_reference_is_released_when_its_block_raises(engine: Engine) -> None:
    _, session = await new_session(engine)
    with pytest.raises(RuntimeError):
        async with engine.core.hold(session.id, CancelKind.INTERNAL):
            raise RuntimeError
    assert (await engine.cancellation(session.id)).pending is False


async def test_c5_a_release_that_cannot_commit_is_retried_until_it_does(
    engine: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    """C5: the database refuses a reference's release once. The failure is logged, the release
    is retried in the background, and once it commits the session is no longer
    cancellation-pending and its queue no longer held (a hold is never kept for good)."""
    _, session = await new_session(engine)
    sid = session.id
    await add_hold(engine, sid, HoldReason.CANCELLING)
    with engine.bus.subscribe(sid, [EventKind.CANCELLATION]) as sub:
        with faults_of(engine).failing("change_hold") as left:
            await engine.core.release_hold(sid, HoldReason.CANCELLING)  # refused, not raised
            assert left() == 0
        cleared = await next_event(sub, EventKind.CANCELLATION)
    assert cleared.cancellation.pending is False  # type: ignore[attr-defined]
    assert await engine.cancellation(sid) == cleared.cancellation  # type: ignore[attr-defined]
    assert "CANCELLING" not in (await engine.queue_status(sid)).held_by
    assert f"could not release the CANCELLING hold of session {sid}" in caplog.messages


async def test_shutdown_cancels_background_work_that_outlives_its_bound(engine: Engine) -> None:
    """Every background task has one shutdown path: ``drain_tasks`` waits for background work
    at most its bound, then cancels what is left and returns."""
    started = asyncio.Event()

    async def forever() -> None:
        started.set()
        await asyncio.Event().wait()

    task = engine.core.spawn(forever(), "test:forever")
    await started.wait()
    await within(engine.core.drain_tasks(0.05), WAIT)
    assert task.cancelled()


async def test_c1_c2_cancel_publishes_one_true_false_pair_in_order(
    engine: Engine, agent: ManualAgent
) -> None:
    sid, run = await busy(engine, agent)
    before = await engine.cancellation(sid)
    with engine.bus.subscribe(sid, [EventKind.CANCELLATION]) as sub:
        result = await engine.cancel(PRINCIPAL, sid)
        first = await next_event(sub, EventKind.CANCELLATION)
        second = await next_event(sub, EventKind.CANCELLATION)
    assert result.outcome is CancelOutcome.STOPPED
    assert (first.cancellation.pending, second.cancellation.pending) == (True, False)  # type: ignore[attr-defined]
    assert before.revision < first.revision < second.revision  # type: ignore[attr-defined]
    assert result.cancellation == CancellationStatus(sid, False, second.revision)  # type: ignore[attr-defined]
    assert run.signals == [Signal.INTERRUPT]


async def test_c3_concurrent_cancels_run_the_stop_once_and_share_the_outcome(
    engine: Engine, agent: ManualAgent
) -> None:
    sid, run = await busy(engine, agent, "/stubborn")
    with engine.bus.subscribe(sid, [EventKind.CANCELLATION]) as sub:
        results = await asyncio.gather(*(engine.cancel(PRINCIPAL, sid) for _ in range(5)))
        events = [await next_event(sub, EventKind.CANCELLATION) for _ in range(2)]
        assert sub.pending() == 0  # exactly one pair
    assert {r.outcome for r in results} == {CancelOutcome.ESCALATED}
    assert run.signals == [Signal.INTERRUPT, Signal.TERMINATE]
    assert [e.cancellation.pending for e in events] == [True, False]  # type: ignore[attr-defined]


async def test_c3_explicit_cancel_does_not_join_a_send_now_replacement(
    engine: Engine, agent: ManualAgent
) -> None:
    sid, run = await busy(engine, agent, "/stubborn")
    entry, _, _ = await engine.enqueue(PRINCIPAL, sid, "replacement", None)
    send_now = asyncio.create_task(
        engine.send_now(PRINCIPAL, sid, SendNowScope.ENTRY, entry.id, None)
    )
    await within(run.signalled.wait(), WAIT)  # the replacement is stopping the turn
    with pytest.raises(UserFacingError) as info:
        await engine.cancel(PRINCIPAL, sid)
    assert info.value.code is ErrorCode.SEND_NOW_CONFLICT
    result = await within(send_now, WAIT)
    assert result.turn is not None and result.turn.prompt == "replacement"


async def test_c4_cancel_runs_to_its_end_when_the_caller_goes_away(
    engine: Engine, agent: ManualAgent
) -> None:
    sid, run = await busy(engine, agent, "/stubborn")
    with engine.bus.subscribe(sid, [EventKind.CANCELLATION]) as sub:
        caller = asyncio.create_task(engine.cancel(PRINCIPAL, sid))
        await next_event(sub, EventKind.CANCELLATION)  # accepted: pending is true
        caller.cancel()
        cleared = await next_event(sub, EventKind.CANCELLATION)
    assert cleared.cancellation.pending is False  # type: ignore[attr-defined]
    assert run.signals == [Signal.INTERRUPT, Signal.TERMINATE]
    turn = await engine.current_turn(sid)
    assert turn is not None and turn.status is TurnStatus.CANCELLED


async def test_c5_an_agent_that_ignores_every_signal_times_out_and_still_clears(
    engine: Engine, agent: ManualAgent
) -> None:
    sid, run = await busy(engine, agent, "/deaf")
    result = await engine.cancel(PRINCIPAL, sid)
    assert result.outcome is CancelOutcome.TIMED_OUT
    assert run.signals[:3] == [Signal.INTERRUPT, Signal.TERMINATE, Signal.KILL]
    assert (await engine.cancellation(sid)).pending is False
    turn = await engine.current_turn(sid)
    assert turn is not None and turn.status is TurnStatus.CANCELLED
    session = await engine.session(PRINCIPAL, sid)
    assert session is not None and session.state.value == "WAITING_FOR_INPUT"


async def test_c7_r2_restart_clears_the_projection_and_revisions_move_forward(
    engine: Engine, open_engine, agent: ManualAgent
) -> None:
    sid, _ = await busy(engine, agent)
    await engine.cancel(PRINCIPAL, sid)
    last = await engine.cancellation(sid)
    await engine.aclose()
    restarted = await open_engine()
    assert (await restarted.cancellation(sid)).pending is False
    await restarted.send_message(PRINCIPAL, sid, "again")
    await agent.next_run()
    result = await restarted.cancel(PRINCIPAL, sid)
    assert result.cancellation.revision > last.revision  # R2: never goes back


async def test_c8_pending_wins_over_a_completion_at_the_same_moment(
    engine: Engine, agent: ManualAgent
) -> None:
    for _ in range(10):
        sid, run = await busy(engine, agent)
        await engine.enqueue(PRINCIPAL, sid, "next", None)
        with engine.bus.subscribe(sid, [EventKind.CANCELLATION]) as sub:
            cancel = asyncio.create_task(engine.cancel(PRINCIPAL, sid))
            await next_event(sub, EventKind.CANCELLATION)
            run.complete()  # the agent finishes while the cancellation is pending
            await cancel
        turn = (await engine.turns_of(sid, 1))[0]
        assert turn.status is TurnStatus.CANCELLED
        await settle(engine, sid)
        assert agent.no_new_run()  # no queued entry starts from that ending


async def test_c8_race_cancel_against_completion_never_starts_a_successor_while_pending(
    engine: Engine, agent: ManualAgent
) -> None:
    """Either the completion wins (COMPLETED, then the next entry may start) or the cancel
    does (CANCELLED, Q7 parks the backlog); never a CANCELLED turn followed by a start."""
    import random

    rng = random.Random(3)
    for _ in range(20):
        sid, run = await busy(engine, agent)
        await engine.enqueue(PRINCIPAL, sid, "next", None)

        async def complete_later() -> None:
            for _ in range(rng.randrange(4)):
                await asyncio.sleep(0)
            run.complete()

        await asyncio.gather(engine.cancel(PRINCIPAL, sid), complete_later())
        await settle(engine, sid)
        first = (await engine.turns_of(sid, 5))[0]
        started = not agent.no_new_run()
        if first.status is TurnStatus.CANCELLED:
            assert not started
            assert (await engine.queue_status(sid)).auto_run is False
        else:
            assert first.status is TurnStatus.COMPLETED
        while not agent.no_new_run():
            (await agent.next_run()).complete()
        assert (await engine.cancellation(sid)).pending is False


async def test_c9_nothing_to_cancel_is_a_no_op_that_withdraws_a_clarification(
    engine: Engine, agent: ManualAgent
) -> None:
    sid, run = await busy(engine, agent)
    await engine.set_auto_run(PRINCIPAL, sid, False, None)
    run.complete(clarification="which?")
    await settle(engine, sid)
    before = await engine.cancellation(sid)
    with engine.bus.subscribe(sid, [EventKind.CANCELLATION]) as sub:
        result = await engine.cancel(PRINCIPAL, sid)
        assert sub.pending() == 0  # no transitions
    assert result.outcome is CancelOutcome.NOTHING_RUNNING
    assert (await engine.cancellation(sid)) == before
    assert await clarification(engine, sid) is None
    status = await engine.queue_status(sid)
    assert status.auto_run is False and status.pause_reason.value == "USER"  # type: ignore[union-attr]


async def test_c9_cancel_on_an_idle_session(engine: Engine) -> None:
    _, session = await new_session(engine)
    result = await engine.cancel(PRINCIPAL, session.id)
    assert result.outcome is CancelOutcome.NOTHING_RUNNING
    assert result.cancellation.pending is False


async def test_q9_cancelling_is_a_hold_and_is_listed(
    engine_settings, open_engine, agent: ManualAgent
) -> None:
    """Q9: while a cancel is under way CANCELLING is listed as a hold and a message sent then
    is queued, not started; the hold goes with the cancel. The stubborn turn ignores the
    interrupt and the cancel timeout is long, so the cancel stays under way until the test
    ends the turn itself (no window to hit under load)."""
    engine = await open_engine(engine_settings.model_copy(update={"cancel_timeout": 60}))
    sid, run = await busy(engine, agent, "/stubborn")
    with engine.bus.subscribe(sid, [EventKind.CANCELLATION, EventKind.QUEUE]) as sub:
        cancel = asyncio.create_task(engine.cancel(PRINCIPAL, sid))
        await next_event(sub, EventKind.CANCELLATION)
        # The hold is recorded (queue revision bumped) right after acceptance.
        status = await engine.queue_status(sid)
        while "CANCELLING" not in status.held_by:
            await next_event(sub, EventKind.QUEUE)
            status = await engine.queue_status(sid)
        admission = await engine.send_message(PRINCIPAL, sid, "while cancelling")
        assert admission.entry is not None  # queued, not started
        assert not cancel.done()
        run.fail("stopped at last")  # the cancel ends with the turn
        await within(cancel, WAIT)
    assert "CANCELLING" not in (await engine.queue_status(sid)).held_by


# -- several instances and dying owners (C5, C7, R2, Q7) -------------------------------------------


def _pg_only(database_url: str) -> None:
    if not database_url.startswith("postgresql"):
        pytest.skip("several instances share a database only on PostgreSQL (M4)")


async def _until(check, what: str) -> None:  # type: ignore[no-untyped-def]
    """Poll a condition owned by other tasks (NOTIFY round trips), with a bounded deadline."""
    for _ in range(int(WAIT / 0.02)):
        if check():
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


async def test_c7_every_instance_reads_the_cancellation_from_the_rows_even_with_listen_cut(
    database_url: str, engine_settings, open_engine, agent: ManualAgent
) -> None:
    """C6, C7, Q9: A runs a stubborn turn and a user's cancel; B reads ``pending: true`` from
    the rows. B's LISTEN is cut while A's cancel ends: B still answers A's status at once (the
    rows, not a relay it may have missed), its queue is not held, and a message sent through B
    to the idle session starts. (When B relayed what it heard, it kept answering a stale
    ``pending: true`` until it asked A again.)"""
    _pg_only(database_url)
    # The stop waits out the ignored interrupt until the test ends the turn itself.
    a = await open_engine(engine_settings.model_copy(update={"cancel_timeout": 60}))
    agent_b = ManualAgent()
    b = await open_engine(agent_=agent_b)
    sid, run = await busy(a, agent, "/stubborn")
    with a.bus.subscribe(sid, [EventKind.CANCELLATION]) as on_a:
        cancel = asyncio.create_task(a.cancel(PRINCIPAL, sid))
        accepted = await next_event(on_a, EventKind.CANCELLATION)
    assert await b.cancellation(sid) == accepted.cancellation  # type: ignore[attr-defined]
    faults_of(b).gate(False)  # B hears nothing from here on
    run.fail("stopped at last")
    result = await within(cancel, WAIT)
    assert result.cancellation.pending is False and result.outcome is CancelOutcome.STOPPED
    assert await b.cancellation(sid) == await a.cancellation(sid) == result.cancellation
    assert "CANCELLING" not in (await b.queue_status(sid)).held_by
    admission = await b.send_message(PRINCIPAL, sid, "through B")
    assert admission.turn is not None
    following = await agent_b.next_run()
    assert following.prompt == "through B"
    following.complete()


async def test_r2_an_older_instance_owning_a_later_turn_continues_above_the_newer_one(
    database_url: str, open_engine, agent: ManualAgent
) -> None:
    """R2: A starts first, B second (a newer epoch). B owns and cancels turn 1 while A hears
    nothing (its LISTEN cut); A then owns and cancels turn 2: its revisions still exceed B's
    (the cancellation revision is durable, on the session's lock row: one counter for all)."""
    _pg_only(database_url)
    a = await open_engine()
    agent_b = ManualAgent()
    b = await open_engine(agent_=agent_b)
    assert b.core.instance > a.core.instance
    faults_of(a).gate(False)  # A hears nothing from here on
    _, session = await new_session(b)
    sid = session.id
    await b.send_message(PRINCIPAL, sid, "turn 1")
    await agent_b.next_run()
    first = await b.cancel(PRINCIPAL, sid)
    assert await a.cancellation(sid) == first.cancellation  # heard nothing, reads the rows
    await a.send_message(PRINCIPAL, sid, "turn 2")
    await agent.next_run()
    with a.bus.subscribe(sid, [EventKind.CANCELLATION]) as on_a:
        second = await a.cancel(PRINCIPAL, sid)
        started = await next_event(on_a, EventKind.CANCELLATION)
    assert started.cancellation.pending is True  # type: ignore[attr-defined]
    assert first.cancellation.revision < started.revision < second.cancellation.revision  # type: ignore[attr-defined]


async def test_q7_an_explicit_cancel_whose_owner_dies_mid_cancel_still_parks_the_backlog(
    engine_settings, open_engine, agent: ManualAgent
) -> None:
    """Q7: the owner dies after accepting an explicit cancel (the stubborn turn ignored the
    interrupt) and before it parked the backlog. Recovery parks it instead of draining: the
    turn fails as interrupted (M6), the entries stay queued in order, paused with reason
    CANCEL, and nothing starts until the user resumes."""
    slow = engine_settings.model_copy(update={"cancel_timeout": 60, "cancel_operation_timeout": 90})
    engine = await open_engine(slow)
    sid, _run = await busy(engine, agent, "/stubborn")
    for content in ("next-1", "next-2"):
        await engine.enqueue(PRINCIPAL, sid, content, None)
    before = (await engine.queue_status(sid)).revision
    cancel = asyncio.create_task(engine.cancel(PRINCIPAL, sid))
    for _ in range(int(WAIT / 0.01)):  # accepted durably: the hold's revision is committed
        if (await engine.queue_status(sid)).revision > before:
            break
        await asyncio.sleep(0.01)
    assert "CANCELLING" in (await engine.queue_status(sid)).held_by
    await crash(engine)  # mid-cancel: the stop is still waiting out the interrupt
    second = ManualAgent()
    restarted = await open_engine(slow, agent_=second)
    turns = await restarted.turns_of(sid, 5)
    assert [(t.status, t.error) for t in turns] == [(TurnStatus.FAILED, "interrupted")]
    status = await restarted.queue_status(sid)
    assert [e.content for e in status.entries] == ["next-1", "next-2"]
    assert status.auto_run is False and status.pause_reason is PauseReason.CANCEL
    assert second.no_new_run()
    resumed = (await restarted.set_auto_run(PRINCIPAL, sid, True, None)).turn  # the user resumes
    assert resumed is not None and resumed.prompt == "next-1"
    assert (await second.next_run()).prompt == "next-1"
    cancel.cancel()  # the dead engine's leftovers
    await asyncio.gather(cancel, return_exceptions=True)
    for run in agent.runs:
        run.fail("process died")


async def crash(engine: Engine) -> None:
    """The process dies (see tests/engine/test_recovery.py): its runtime forgets its turns."""
    engine.core.closing = True
    engine.core.runners.clear()
    if engine.core.cluster is not None:
        await engine.core.cluster.aclose()


async def test_c1_q7_a_cancel_with_a_backlog_is_three_transactions(
    engine: Engine, agent: ManualAgent
) -> None:
    """C1, Q7: an explicit cancel of a running turn with entries queued writes three
    transactions: the acceptance (the durable mark and the reference: pending from its commit
    on), the stopped turn's end, and the finish, which parks the backlog and releases the
    reference in one commit, so no moment shows the reference gone and the backlog not
    parked."""
    _, session = await new_session(engine)
    sid = session.id
    await engine.send_message(PRINCIPAL, sid, "first")
    await agent.next_run()
    await engine.enqueue(PRINCIPAL, sid, "B", None)
    faults = faults_of(engine)
    seen: list[Event] = []
    engine.bus.add_listener(lambda e: seen.append(e) if e.session_id == sid else None)
    first = len(faults.writes)
    result = await engine.cancel(PRINCIPAL, sid)
    # Units of work on a session begin with its lock row; the cluster's own sweeps do not.
    writes = [sorted(called) for called in faults.writes[first:] if "lock" in called]
    assert len(writes) == 3, writes
    assert {"set_cancel_mark", "change_hold"} <= set(writes[0]) and "end_turn" in writes[1]
    assert {"set_policy", "change_hold", "set_cancel_mark"} <= set(writes[2])
    assert result.outcome is CancelOutcome.STOPPED and not result.cancellation.pending
    pending = [e.cancellation.pending for e in seen if e.cancellation is not None]
    assert pending == [True, False]
    status = await engine.queue_status(sid)
    assert (status.auto_run, status.pause_reason) == (False, PauseReason.CANCEL)
    assert [e.content for e in status.entries] == ["B"] and HoldReason.CANCELLING not in (
        status.held_by
    )
    assert status.revision == max(e.revision for e in seen if e.kind is EventKind.QUEUE)
    await settle(engine, sid)
    assert agent.no_new_run()


async def test_c5_a_cancel_whose_finish_cannot_commit_still_releases_its_reference(
    engine: Engine, agent: ManualAgent
) -> None:
    """C5: the explicit reference is taken with the acceptance and ended by the finish; when
    the finish cannot commit (the database away while it parks the backlog), the cancel
    answers the store's error and the reference is released on its own: the session does not
    stay cancellation-pending, and the turn was stopped."""
    _, session = await new_session(engine)
    sid = session.id
    await engine.send_message(PRINCIPAL, sid, "first")
    await agent.next_run()
    await engine.enqueue(PRINCIPAL, sid, "B", None)
    with faults_of(engine).failing("set_policy"), pytest.raises(StoreError):
        await engine.cancel(PRINCIPAL, sid)
    assert not (await engine.cancellation(sid)).pending
    status = await engine.queue_status(sid)
    assert HoldReason.CANCELLING not in status.held_by
    turn = await engine.current_turn(sid)
    assert turn is not None and turn.status is TurnStatus.CANCELLED
