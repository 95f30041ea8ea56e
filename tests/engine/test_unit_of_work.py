"""The per-session unit of work (``engine/change.py``) and the runtime hold (``Core.hold``)."""

from __future__ import annotations

import asyncio

import pytest
from engine_helpers import PRINCIPAL, ManualAgent, new_session, next_event

from turnqueue.bus import EventKind
from turnqueue.domain import CancelKind, HoldReason, MessageSource, SessionState
from turnqueue.engine.orchestrator import Engine
from turnqueue.errors import Conflict, ErrorCode


async def test_q13_a_stale_expected_revision_raises_before_the_body(engine: Engine) -> None:
    """Q13: the unit of work checks ``expectedRevision`` under the lock row, before the rule's
    body runs: QUEUE_CHANGED, and nothing changes."""
    _, session = await new_session(engine)
    before = await engine.queue_status(session.id)
    ran = False
    with pytest.raises(Conflict) as info:
        async with engine.core.change(session.id, before.revision + 1):
            ran = True
    assert info.value.code is ErrorCode.QUEUE_CHANGED and not ran
    assert await engine.queue_status(session.id) == before


async def test_q13_one_queue_revision_and_nothing_published_when_the_body_raises(
    engine: Engine,
) -> None:
    """Q13: two queue changes in one unit of work share one revision and one event; a body
    that raises rolls back and publishes nothing."""
    _, session = await new_session(engine)
    sid = session.id
    before = await engine.queue_status(sid)
    with engine.subscribe(sid, [EventKind.QUEUE, EventKind.SESSION]) as sub:
        async with engine.core.change(sid) as c:
            first = await c.queue_changed()
            second = await c.queue_changed()
        assert first == second == before.revision + 1
        event = await next_event(sub, EventKind.QUEUE)
        assert event.revision == first  # type: ignore[attr-defined]
        with pytest.raises(RuntimeError):
            async with engine.core.change(sid) as c:
                await c.queue_changed()
                await c.set_session_state(SessionState.COMPLETED)
                raise RuntimeError("the rule refuses")
        with pytest.raises(TimeoutError):
            await next_event(sub, EventKind.QUEUE, timeout=0.2)
    status = await engine.queue_status(sid)
    assert status.revision == first
    assert (await engine.authorize_session(PRINCIPAL, sid)).state is SessionState.WAITING_FOR_INPUT


async def test_r1_session_events_carry_the_committed_session_revision(
    engine: Engine, agent: ManualAgent
) -> None:
    """R1, R3: a turn's start and end publish session events with the session revision they
    committed (not 0), so a subscriber may keep the highest."""
    _, session = await new_session(engine)
    sid = session.id
    with engine.subscribe(sid, [EventKind.SESSION]) as sub:
        await engine.send_message(PRINCIPAL, sid, "hello")
        started = await next_event(sub, EventKind.SESSION)
        running = await engine.authorize_session(PRINCIPAL, sid)
        assert started.revision == running.revision > session.revision  # type: ignore[attr-defined]
        (await agent.next_run()).complete()
        ended = await next_event(sub, EventKind.SESSION)
        waiting = await engine.authorize_session(PRINCIPAL, sid)
        assert ended.revision == waiting.revision > running.revision  # type: ignore[attr-defined]


async def test_q9_a_hold_bumps_the_queue_revision_when_it_starts_and_ends(
    engine: Engine, agent: ManualAgent
) -> None:
    """Q9, Q13: ``Core.hold`` serves its hold with a revision of its own and releases it (with
    another) on every exit, a failing body's included."""
    _, session = await new_session(engine)
    sid = session.id
    before = await engine.queue_status(sid)
    with pytest.raises(RuntimeError):
        async with engine.core.hold(sid, CancelKind.INTERNAL):
            during = await engine.queue_status(sid)
            raise RuntimeError("the body fails")
    after = await engine.queue_status(sid)
    assert HoldReason.CANCELLING in during.held_by and during.revision > before.revision
    assert HoldReason.CANCELLING not in after.held_by and after.revision > during.revision
    async with engine.core.hold(sid):
        assert HoldReason.WORKFLOW_TRANSITION in (await engine.queue_status(sid)).held_by
    assert not engine.core.runtime_holds(sid)


async def test_q3_a_turn_started_in_a_unit_of_work_launches_only_after_commit(
    engine: Engine, agent: ManualAgent
) -> None:
    """Q3, Q10: a start whose unit of work rolls back launches no agent."""
    _, session = await new_session(engine)
    sid = session.id
    with pytest.raises(RuntimeError):
        async with engine.core.change(sid) as c:
            await engine.turns.start_in(c, "never", MessageSource.USER, [])
            raise RuntimeError("rolled back")
    assert sid not in engine.core.runners
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(agent.next_run(), 0.2)
    assert (await engine.current_turn(sid)) is None
    await engine.send_message(PRINCIPAL, sid, "now")  # the ordinary path does launch
    assert (await agent.next_run()).prompt == "now"
