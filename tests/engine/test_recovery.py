"""Recovery at start-up (M6) and durability across restarts (Q1, Q10, R2)."""

from __future__ import annotations

import asyncio

from engine_helpers import PRINCIPAL, ManualAgent, new_session, next_event
from engine_probes import pending_approval

from turnqueue.agents.acp_run import PermissionRequest
from turnqueue.bus import EventKind
from turnqueue.domain import ApprovalOutcome, HoldReason, SessionState, TurnStatus
from turnqueue.engine import Engine


async def crash(engine: Engine) -> None:
    """The process dies: its runtime forgets everything, the database keeps the RUNNING turn.
    (``closing`` keeps the dead engine's leftover tasks from starting anything afterwards.) On
    PostgreSQL its instance row goes too, as when its lease expires (M4)."""
    engine.core.closing = True
    engine.core.runners.clear()
    if engine.core.cluster is not None:
        await engine.core.cluster.aclose()


def bury(agent: ManualAgent) -> None:
    """Let the dead engine's leftover agent runs end, so its shutdown does not wait for them."""
    for run in agent.runs:
        run.fail("process died")


async def test_m6_a_turn_left_running_fails_as_interrupted_and_the_queue_drains(
    engine: Engine, open_engine, agent: ManualAgent
) -> None:
    _, session = await new_session(engine)
    sid = session.id
    await engine.send_message(PRINCIPAL, sid, "interrupted work")
    await agent.next_run()
    await engine.enqueue(PRINCIPAL, sid, "after the crash", None)
    session_revision = (await engine.session(PRINCIPAL, sid)).revision  # type: ignore[union-attr]
    queue_revision = (await engine.queue_status(sid)).revision
    await crash(engine)
    second = ManualAgent()
    restarted = await open_engine(agent_=second)
    turns = await restarted.turns_of(sid, 5)
    assert turns[0].status is TurnStatus.FAILED and turns[0].error == "interrupted"
    status = await restarted.cancellation(sid)  # nothing was pending: nothing to clear (C2)
    assert status.pending is False and status.revision == 0
    nxt = await second.next_run()  # one automatic drain decides what runs next
    assert nxt.prompt == "after the crash"
    after = await restarted.session(PRINCIPAL, sid)
    assert after is not None and after.state is SessionState.RUNNING
    assert after.revision > session_revision  # R2: durable revisions move forward
    assert (await restarted.queue_status(sid)).revision > queue_revision
    bury(agent)


async def test_m6_recovery_respects_a_paused_queue(
    engine: Engine, open_engine, agent: ManualAgent
) -> None:
    _, session = await new_session(engine)
    await engine.send_message(PRINCIPAL, session.id, "work")
    await agent.next_run()
    await engine.enqueue(PRINCIPAL, session.id, "held", None)
    await engine.set_auto_run(PRINCIPAL, session.id, False, None)
    await crash(engine)
    second = ManualAgent()
    restarted = await open_engine(agent_=second)
    status = await restarted.queue_status(session.id)
    assert [e.content for e in status.entries] == ["held"] and status.auto_run is False
    assert second.no_new_run()
    after = await restarted.session(PRINCIPAL, session.id)
    assert after is not None and after.state is SessionState.WAITING_FOR_INPUT
    bury(agent)


async def test_a6_m6_recovery_settles_the_approval_a_crashed_turn_waited_for(
    engine: Engine, open_engine, agent: ManualAgent
) -> None:
    """A6, A10, M6: the server dies while an approval of a running turn waits for its answer.
    Recovery ends the turn interrupted and settles the approval in the record — CANCELLED, by
    ``system``, when — so no approval of an ended turn reads PENDING; the queue is not held."""
    _, session = await new_session(engine)
    sid = session.id
    await engine.send_message(PRINCIPAL, sid, "work")
    run = await agent.next_run()
    request = PermissionRequest(
        sid, run.turn_id, "Run ls", "call-1", (("yes", "Allow", "allow_once"),)
    )
    with engine.bus.subscribe(sid, [EventKind.QUEUE]) as sub:
        asking = asyncio.create_task(engine.approvals.ask(request))
        while HoldReason.APPROVAL not in (await engine.queue_status(sid)).held_by:
            await next_event(sub, EventKind.QUEUE)
    await crash(engine)
    restarted = await open_engine(agent_=ManualAgent())
    (approval,) = await restarted.approvals_of_turn(run.turn_id)
    assert (approval.outcome, approval.answered_by) == (ApprovalOutcome.CANCELLED, "system")
    assert approval.answered_at is not None and approval.option_id is None
    assert await pending_approval(restarted, sid) is None
    assert HoldReason.APPROVAL not in (await restarted.queue_status(sid)).held_by
    asking.cancel()
    bury(agent)
