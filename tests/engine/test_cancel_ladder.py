"""The stop ladder and the explicit cancel's edges (C3, C4, C5, C9, Q7), through the engine.

Each test names the rung or edge it pins; written against the survivors of a mutation run of
``engine/cancel.py`` (``tests/MUTANTS.md``).
"""

from __future__ import annotations

import asyncio

import pytest
from engine_helpers import PRINCIPAL, WAIT, ManualAgent, new_session, next_event, settle
from engine_probes import clarification

from turnqueue.agents import Signal
from turnqueue.bus import EventKind
from turnqueue.domain import (
    CancelOutcome,
    ItemKind,
    MessageSource,
    OutputRecord,
    PauseReason,
    SendNowScope,
    TurnStatus,
)
from turnqueue.engine import Engine
from turnqueue.errors import ErrorCode, UserFacingError
from turnqueue.timeouts import within


async def busy(engine: Engine, agent: ManualAgent, prompt: str) -> str:
    _, session = await new_session(engine)
    await engine.send_message(PRINCIPAL, session.id, prompt)
    await agent.next_run()
    return session.id


async def test_c5_an_agent_that_stops_only_on_kill_is_escalated(
    engine: Engine, agent: ManualAgent
) -> None:
    """C4/C5: SIGINT ignored, SIGTERM ignored, SIGKILL obeyed: the ladder's last rung stops it
    and the outcome is ESCALATED, the turn CANCELLED, pending false."""
    sid = await busy(engine, agent, "/hardy")
    result = await engine.cancel(PRINCIPAL, sid)
    assert result.outcome is CancelOutcome.ESCALATED
    assert agent.runs[-1].signals == [Signal.INTERRUPT, Signal.TERMINATE, Signal.KILL]
    assert result.cancellation.pending is False
    turn = await engine.current_turn(sid)
    assert turn is not None and turn.status is TurnStatus.CANCELLED


async def test_c5_a_signal_that_cannot_be_delivered_abandons_the_agent_and_still_clears(
    engine: Engine, agent: ManualAgent
) -> None:
    """C5: an agent whose signals raise is abandoned like one that ignores them: the cancel
    answers TIMED_OUT (no error to the caller), the turn ends CANCELLED, pending clears, and
    the next cancel of the session starts from nothing (no stale joined operation, C3)."""
    sid = await busy(engine, agent, "/broken")
    result = await within(engine.cancel(PRINCIPAL, sid), WAIT)
    assert result.outcome is CancelOutcome.TIMED_OUT
    assert result.cancellation.pending is False
    turn = await engine.current_turn(sid)
    assert turn is not None and turn.status is TurnStatus.CANCELLED
    again = await engine.cancel(PRINCIPAL, sid)
    assert again.outcome is CancelOutcome.NOTHING_RUNNING


async def test_c3_a_finished_cancel_is_not_joined_by_the_next_one(
    engine: Engine, agent: ManualAgent
) -> None:
    """C3: concurrent cancels join one operation, but once it is over the next cancel of the
    same session is a new operation that stops the new turn."""
    sid = await busy(engine, agent, "first")
    assert (await engine.cancel(PRINCIPAL, sid)).outcome is CancelOutcome.STOPPED
    await engine.send_message(PRINCIPAL, sid, "second")
    second = await agent.next_run()
    result = await engine.cancel(PRINCIPAL, sid)
    assert result.outcome is CancelOutcome.STOPPED and second.signals == [Signal.INTERRUPT]
    turns = await engine.turns_of(sid, 5)
    assert [t.status for t in turns] == [TurnStatus.CANCELLED, TurnStatus.CANCELLED]


async def test_c3_a_cancel_during_a_send_now_replacement_is_refused_with_its_reason(
    engine: Engine, agent: ManualAgent
) -> None:
    """C3: while a Send Now replaces the active turn, an explicit cancel is refused with
    SEND_NOW_CONFLICT and a message that says why; the replacement runs on."""
    sid = await busy(engine, agent, "/stubborn")
    run = agent.runs[-1]
    entry, _, _ = await engine.enqueue(PRINCIPAL, sid, "replacement", None)
    send_now = asyncio.create_task(
        engine.send_now(PRINCIPAL, sid, SendNowScope.ENTRY, entry.id, None)
    )
    await within(run.signalled.wait(), WAIT)
    with pytest.raises(UserFacingError) as info:
        await engine.cancel(PRINCIPAL, sid)
    assert info.value.code is ErrorCode.SEND_NOW_CONFLICT
    assert info.value.message == "a Send Now is replacing the active turn right now"
    result = await within(send_now, WAIT)
    assert result.turn is not None and result.turn.prompt == "replacement"


async def test_q7_a_cancel_with_an_empty_queue_leaves_auto_run_on(
    engine: Engine, agent: ManualAgent
) -> None:
    """Q7: only a backlog is parked; a cancel with nothing queued leaves auto-run ON with no
    pause reason, and the next message starts at once."""
    sid = await busy(engine, agent, "work")
    before = await engine.queue_status(sid)
    await engine.cancel(PRINCIPAL, sid)
    status = await engine.queue_status(sid)
    assert (status.auto_run, status.pause_reason) == (True, None)
    assert status.revision > before.revision  # the CANCELLING hold came and went (Q13)
    admission = await engine.send_message(PRINCIPAL, sid, "next")
    assert admission.turn is not None
    (await agent.next_run()).complete()


async def test_q7_the_park_happens_before_pending_clears(
    engine: Engine, agent: ManualAgent
) -> None:
    """Q7/C5: when ``cancellationPending`` turns false, the backlog is already parked (reason
    CANCEL): no client can see the cancel over with auto-run still ON."""
    sid = await busy(engine, agent, "/stubborn")
    await engine.enqueue(PRINCIPAL, sid, "queued", None)
    seen: list[tuple[bool, bool, PauseReason | None]] = []
    with engine.bus.subscribe(sid, [EventKind.CANCELLATION]) as sub:
        cancel = asyncio.create_task(engine.cancel(PRINCIPAL, sid))
        for _ in "ab":
            event = await next_event(sub, EventKind.CANCELLATION)
            status = await engine.queue_status(sid)
            seen.append((event.cancellation.pending, status.auto_run, status.pause_reason))  # type: ignore[attr-defined]
        await cancel
    assert seen[1] == (False, False, PauseReason.CANCEL)
    await settle(engine, sid)
    assert agent.no_new_run()


async def test_c9_a_withdrawn_clarification_is_published_even_when_nothing_starts(
    engine: Engine, agent: ManualAgent
) -> None:
    """C9: a cancel with nothing running withdraws a pending clarification and publishes the
    session's change itself (with auto-run OFF no drain follows, so no later start publishes
    it instead)."""
    sid = await busy(engine, agent, "work")
    await engine.set_auto_run(PRINCIPAL, sid, False, None)
    agent.runs[-1].complete(clarification="which one?")
    await settle(engine, sid)
    await engine.enqueue(PRINCIPAL, sid, "held", None)
    with engine.bus.subscribe(sid, [EventKind.SESSION]) as sub:
        result = await engine.cancel(PRINCIPAL, sid)
        event = await next_event(sub, EventKind.SESSION)
    assert result.outcome is CancelOutcome.NOTHING_RUNNING
    assert event.session_id == sid  # type: ignore[attr-defined]
    assert await clarification(engine, sid) is None
    assert agent.no_new_run()


async def test_c5_o1_a_turn_whose_agent_is_gone_keeps_its_logged_output(
    engine: Engine,
) -> None:
    """C5/O1: a RUNNING turn with no agent behind it, ended by an explicit cancel, keeps the
    output its durable log holds."""
    _, session = await new_session(engine)
    sid = session.id
    async with engine.core.store.transaction() as tx:
        await tx.lock(sid)
        ghost = await tx.start_turn(
            sid, prompt="ghost", source=MessageSource.USER, owner=engine.core.instance
        )
        await tx.append_output({ghost.id: [OutputRecord(ghost.id, 0, 0, ItemKind.MESSAGE, "half")]})
    result = await engine.cancel(PRINCIPAL, sid)
    assert result.outcome is CancelOutcome.STOPPED
    turn = await engine.current_turn(sid)
    assert turn is not None
    assert (turn.id, turn.status, turn.error, turn.output) == (
        ghost.id,
        TurnStatus.CANCELLED,
        "agent gone",
        "half",
    )
