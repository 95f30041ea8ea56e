"""Queue refusals and Send Now's edges, written to kill the mutants mutmut found surviving in
``engine/queue.py`` (scripts/mutation.py): each refusal's exact code, message and field, the
``expectedRevision`` check of every mutation (Q13), the source a Send Now turn keeps (Q5), a turn
slipping in between Send Now's claim and its delivery (Q10), and the queue revision bumped when a
replacement's CANCELLING hold starts and ends (Q13, Q9)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any

import pytest
from engine_helpers import PRINCIPAL, WAIT, ManualAgent, new_session, next_event, settle
from test_combinations import waiting_on
from test_queue_rules import busy_session, enqueue

from turnqueue.bus import EventKind
from turnqueue.domain import HoldReason, MessageSource, SendNowScope, SessionState
from turnqueue.engine import Engine
from turnqueue.errors import ErrorCode, UserFacingError
from turnqueue.timeouts import within


async def refusal(call: Awaitable[Any]) -> tuple[ErrorCode, str, list[str] | None]:
    with pytest.raises(UserFacingError) as info:
        await call
    return info.value.code, info.value.message, info.value.field


async def stale(engine: Engine, sid: str) -> int:
    return (await engine.queue_status(sid)).revision - 1


# -- Q6 drain ---------------------------------------------------------------------------------
async def test_q6_drain_refusals_name_what_holds_the_session(
    engine: Engine, agent: ManualAgent
) -> None:
    """Q6: drain needs a promptable session with no clarification; each refusal says which."""
    sid, run = await busy_session(engine, agent)
    assert await refusal(engine.drain(PRINCIPAL, sid, None)) == (
        ErrorCode.SESSION_BUSY,
        "a turn is running",
        None,
    )
    run.complete(clarification="which one?")
    await settle(engine, sid)
    assert await refusal(engine.drain(PRINCIPAL, sid, None)) == (
        ErrorCode.CLARIFICATION_PENDING,
        "the agent asked a question",
        None,
    )
    await engine.cancel(PRINCIPAL, sid)  # withdraws the clarification (C9)
    async with engine.core.store.transaction() as tx:
        await tx.lock(sid)
        await tx.set_session_state(sid, SessionState.FAILED)
    assert await refusal(engine.drain(PRINCIPAL, sid, None)) == (
        ErrorCode.SESSION_NOT_PROMPTABLE,
        "session is FAILED",
        None,
    )


# -- Q13 expectedRevision on every mutation ----------------------------------------------------
async def test_q13_stale_expected_revision_refuses_edit_reorder_and_drain(engine: Engine) -> None:
    """Q13: a stale ``expectedRevision`` changes nothing, on each mutation that takes one."""
    _, session = await new_session(engine)
    sid = session.id
    await engine.set_auto_run(PRINCIPAL, sid, False, None)
    ids = await enqueue(engine, sid, "a", "b")
    before = await engine.queue_status(sid)
    changed = (ErrorCode.QUEUE_CHANGED, f"queue revision is {before.revision}, not ")
    for call in (
        lambda x: engine.update_entry(PRINCIPAL, sid, ids[0], "edited", x),
        lambda x: engine.reorder_queue(PRINCIPAL, sid, list(reversed(ids)), x),
        lambda x: engine.drain(PRINCIPAL, sid, x),
    ):
        code, message, field = await refusal(call(await stale(engine, sid)))
        assert (code, message[: len(changed[1])], field) == (*changed, ["expectedRevision"])
    assert await engine.queue_status(sid) == before


async def test_q12_refusals_of_edit_and_reorder_name_the_field(engine: Engine) -> None:
    """Q12: a non-USER entry is NOT_EDITABLE (field entryId); orderedIds that are not exactly
    the queued entries is QUEUE_CHANGED (field orderedIds)."""
    _, session = await new_session(engine)
    sid = session.id
    await engine.set_auto_run(PRINCIPAL, sid, False, None)
    agent_entry, _, _ = await engine.queue.enqueue(sid, "from the agent", None, MessageSource.AGENT)
    (user_entry,) = await enqueue(engine, sid, "mine")
    assert await refusal(engine.update_entry(PRINCIPAL, sid, agent_entry.id, "x", None)) == (
        ErrorCode.NOT_EDITABLE,
        "a AGENT entry cannot be edited",
        ["entryId"],
    )
    assert await refusal(engine.reorder_queue(PRINCIPAL, sid, [user_entry], None)) == (
        ErrorCode.QUEUE_CHANGED,
        "orderedIds must list exactly the queued entries",
        ["orderedIds"],
    )


# -- Q5 Send Now --------------------------------------------------------------------------------
async def test_q5_send_now_with_a_pending_clarification_is_refused(
    engine: Engine, agent: ManualAgent
) -> None:
    sid, run = await busy_session(engine, agent)
    (entry,) = await enqueue(engine, sid, "later")
    run.complete(clarification="which one?")
    await settle(engine, sid)
    assert await refusal(engine.send_now(PRINCIPAL, sid, SendNowScope.ENTRY, entry, None)) == (
        ErrorCode.CLARIFICATION_PENDING,
        "the agent asked a question",
        None,
    )


async def test_q5_send_now_on_a_session_that_cannot_take_prompts_is_refused(
    engine: Engine,
) -> None:
    _, session = await new_session(engine)
    sid = session.id
    await engine.set_auto_run(PRINCIPAL, sid, False, None)
    (entry,) = await enqueue(engine, sid, "later")
    async with engine.core.store.transaction() as tx:
        await tx.lock(sid)
        await tx.set_session_state(sid, SessionState.FAILED)
    assert await refusal(engine.send_now(PRINCIPAL, sid, SendNowScope.ENTRY, entry, None)) == (
        ErrorCode.SESSION_NOT_PROMPTABLE,
        "session is FAILED",
        None,
    )


async def test_q5_send_now_keeps_the_source_of_one_entry_and_all_is_user(
    engine: Engine, agent: ManualAgent
) -> None:
    """Q5: the turn of one entry keeps that entry's source; several joined are USER's."""
    _, session = await new_session(engine)
    sid = session.id
    await engine.set_auto_run(PRINCIPAL, sid, False, None)
    one, _, _ = await engine.queue.enqueue(sid, "from the workflow", None, MessageSource.WORKFLOW)
    result = await engine.send_now(PRINCIPAL, sid, SendNowScope.ENTRY, one.id, None)
    assert result.turn is not None and result.turn.source is MessageSource.WORKFLOW
    (await agent.next_run()).complete()
    await settle(engine, sid)
    await engine.set_auto_run(PRINCIPAL, sid, False, None)  # Send Now turned it ON
    for content in ("agent 1", "agent 2"):
        await engine.queue.enqueue(sid, content, None, MessageSource.AGENT)
    both = await engine.send_now(PRINCIPAL, sid, SendNowScope.ALL, None, None)
    assert both.turn is not None and both.turn.source is MessageSource.USER
    assert both.turn.prompt == "agent 1\n\nagent 2" and both.sent_count == 2


async def test_q10_a_turn_slipping_in_before_delivery_returns_the_claim_to_the_head(
    engine: Engine, agent: ManualAgent
) -> None:
    """Q5, Q10: on an idle session Send Now claims B, then a sendMessage that was waiting
    starts its turn before the delivery. The delivery answers TURN_CHANGED and B returns to
    the head with its id, in a new queue revision; auto-run stays ON (Q5)."""
    _, session = await new_session(engine)
    sid = session.id
    await engine.set_auto_run(PRINCIPAL, sid, False, None)
    ids = await enqueue(engine, sid, "A", "B")
    lock = engine.core.session_lock(sid)
    async with lock:
        send_now = asyncio.create_task(
            engine.send_now(PRINCIPAL, sid, SendNowScope.ENTRY, ids[1], None)
        )
        await waiting_on(lock, 1)
        message = asyncio.create_task(engine.send_message(PRINCIPAL, sid, "X"))
        await waiting_on(lock, 2)
    assert await refusal(send_now) == (
        ErrorCode.TURN_CHANGED,
        "another turn started meanwhile",
        None,
    )
    assert (await message).turn is not None
    status = await engine.queue_status(sid)
    assert [e.id for e in status.entries] == [ids[1], ids[0]]
    assert status.auto_run is True
    assert (await agent.next_run()).prompt == "X" and agent.no_new_run()


async def test_q13_q9_replacement_bumps_the_queue_revision_as_cancelling_starts_and_ends(
    open_engine: Any, engine_settings: Any, agent: ManualAgent
) -> None:
    """Q13, Q9: a Send Now replacing a stubborn turn serves a new queue revision holding
    CANCELLING while it stops the turn: the claim's, which takes the reference with it
    (published before the first signal); once delivered, a later one without it (the
    delivery's, which releases the reference with it).
    (The interrupt is waited out for 3 s, not 0.5: on a loaded machine the checks below
    took longer than that, and the escalation had ended the turn before them.)"""
    engine = await open_engine(
        engine_settings.model_copy(update={"cancel_timeout": 3, "cancel_operation_timeout": 10})
    )
    sid, run = await busy_session(engine, agent)
    await engine.send_message(PRINCIPAL, sid, "/stubborn")  # queued behind "first"
    run.complete()
    stubborn = await agent.next_run()
    (entry,) = await enqueue(engine, sid, "B")
    before = await engine.queue_status(sid)
    with engine.bus.subscribe(sid, [EventKind.QUEUE]) as sub:
        send_now = asyncio.create_task(
            engine.send_now(PRINCIPAL, sid, SendNowScope.ENTRY, entry, None)
        )
        await within(stubborn.signalled.wait(), WAIT)  # the interrupt it ignores
        claim = await next_event(sub, EventKind.QUEUE)
        during = await engine.queue_status(sid)
        assert not stubborn.done  # published before the first signal
    assert before.revision < claim.revision == during.revision  # type: ignore[attr-defined]
    assert HoldReason.CANCELLING in during.held_by and during.entries == ()
    result = await send_now
    assert result.turn is not None and result.turn.prompt == "B"
    after = await engine.queue_status(sid)
    assert after.revision > during.revision and HoldReason.CANCELLING not in after.held_by


async def test_q3_enqueue_on_a_free_session_starts_it_in_the_same_transaction(
    engine: Engine, agent: ManualAgent
) -> None:
    """Q3: the drain after enqueueMessage starts the entry on a free session with auto-run
    ON, and answers the turn; with auto-run OFF it stays queued (PAUSED)."""
    _, session = await new_session(engine)
    sid = session.id
    _, turn, _ = await engine.enqueue(PRINCIPAL, sid, "now", None)
    assert turn is not None and turn.prompt == "now"
    assert (await agent.next_run()).prompt == "now"
    assert (await engine.queue_status(sid)).entries == ()
    assert [t.prompt for t in await engine.turns_of(sid, 5)] == ["now"]
    await engine.set_auto_run(PRINCIPAL, sid, False, None)
    _, held, _ = await engine.enqueue(PRINCIPAL, sid, "later", None)
    assert held is None


async def test_q12_an_unknown_entry_is_entry_not_found_on_the_entry_id(engine: Engine) -> None:
    _, session = await new_session(engine)
    missing = "00000000-0000-4000-8000-000000000000"
    for call in (
        engine.update_entry(PRINCIPAL, session.id, missing, "x", None),
        engine.remove_entry(PRINCIPAL, session.id, missing, None),
        engine.send_now(PRINCIPAL, session.id, SendNowScope.ENTRY, missing, None),
    ):
        assert await refusal(call) == (
            ErrorCode.ENTRY_NOT_FOUND,
            "no such entry in this queue",
            ["entryId"],
        )


async def test_c3_send_now_during_an_explicit_cancel_is_send_now_conflict(
    engine: Engine, agent: ManualAgent
) -> None:
    """C3, Q5: while an explicit cancel stops the turn, a Send Now does not start a
    replacement of its own: SEND_NOW_CONFLICT, and the queue is as it was."""
    sid, run = await busy_session(engine, agent)
    await engine.send_message(PRINCIPAL, sid, "/stubborn")
    run.complete()
    stubborn = await agent.next_run()
    (entry,) = await enqueue(engine, sid, "B")
    cancel = asyncio.create_task(engine.cancel(PRINCIPAL, sid))
    await within(stubborn.signalled.wait(), WAIT)  # the cancel is under way
    before = await engine.queue_status(sid)
    assert await refusal(engine.send_now(PRINCIPAL, sid, SendNowScope.ENTRY, entry, None)) == (
        ErrorCode.SEND_NOW_CONFLICT,
        "a cancellation is already under way",
        None,
    )
    assert await engine.queue_status(sid) == before
    await cancel
