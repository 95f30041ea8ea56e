"""M4 in one process: a cancel or a Send Now asked of an instance that does not run the session's
turn is run by the instance that does (a request row its owner reacts to, ``Cluster.call``), and
its outcome or its refusal comes back to the instance that was asked. Two engines on one
PostgreSQL database; ``tests/cluster`` does the same across real server processes."""

from __future__ import annotations

import pytest
from engine_helpers import PRINCIPAL, WAIT, ManualAgent, new_session

from turnqueue.agents import Signal
from turnqueue.domain import CancelOutcome, SendNowScope, TurnStatus
from turnqueue.engine import Engine
from turnqueue.errors import ErrorCode, UserFacingError
from turnqueue.timeouts import within


def _pg_only(database_url: str) -> None:
    if not database_url.startswith("postgresql"):
        pytest.skip("several instances share a database only on PostgreSQL (M4)")


async def _running_on_a(open_engine, agent: ManualAgent):  # type: ignore[no-untyped-def]
    """A runs a turn of a new session; B is a second instance with an agent of its own."""
    a: Engine = await open_engine()
    agent_b = ManualAgent()
    b: Engine = await open_engine(agent_=agent_b)
    _, session = await new_session(a)
    await a.send_message(PRINCIPAL, session.id, "work")
    return a, b, agent_b, session.id, await agent.next_run()


async def test_m4_c4_a_cancel_asked_of_another_instance_stops_the_owners_agent(
    database_url: str, open_engine, agent: ManualAgent
) -> None:
    """M4, C4: B is asked to cancel the turn A runs. A's agent is the one signalled, the turn
    ends CANCELLED with its agent's own error (not as an agent that is gone), and B answers
    A's outcome."""
    _pg_only(database_url)
    a, b, agent_b, sid, run = await _running_on_a(open_engine, agent)
    result = await within(b.cancel(PRINCIPAL, sid), WAIT)
    assert run.signals == [Signal.INTERRUPT]
    assert result.outcome is CancelOutcome.STOPPED
    assert result.cancellation.pending is False
    [turn] = await b.turns_of(sid, 5)
    assert (turn.status, turn.error) == (TurnStatus.CANCELLED, "stopped by INTERRUPT")
    assert await a.cancellation(sid) == result.cancellation
    assert agent_b.no_new_run()


async def test_m4_q5_a_send_now_asked_of_another_instance_runs_on_the_owner(
    database_url: str, open_engine, agent: ManualAgent
) -> None:
    """M4, Q5: B is asked to Send Now the queue of a session whose turn A runs. A stops its
    agent and starts the entry on its own agent; B answers that turn and the count sent."""
    _pg_only(database_url)
    a, b, agent_b, sid, run = await _running_on_a(open_engine, agent)
    await b.enqueue(PRINCIPAL, sid, "now", None)
    result = await within(b.send_now(PRINCIPAL, sid, SendNowScope.ALL, None, None), WAIT)
    assert run.signals == [Signal.INTERRUPT]
    following = await agent.next_run()
    assert following.prompt == "now"
    assert result.sent_count == 1
    assert result.turn is not None and result.turn.prompt == "now"
    assert result.turn.owner == a.core.instance
    assert (await b.queue_status(sid)).entries == ()
    assert agent_b.no_new_run()
    following.complete()


async def test_m4_q5_a_send_now_refused_by_the_owner_is_refused_where_it_was_asked(
    database_url: str, open_engine, agent: ManualAgent
) -> None:
    """M4, Q5: the owner's refusal (an entry that is not queued) comes back to B as the same
    userError, and nothing changed: A's turn runs on, unsignalled."""
    _pg_only(database_url)
    a, b, _, sid, run = await _running_on_a(open_engine, agent)
    entry = (await b.enqueue(PRINCIPAL, sid, "later", None)).entry
    before = await a.queue_status(sid)
    missing = entry.id[:-1] + ("0" if entry.id[-1] != "0" else "1")
    with pytest.raises(UserFacingError) as refused:
        await within(b.send_now(PRINCIPAL, sid, SendNowScope.ENTRY, missing, None), WAIT)
    assert refused.value.code is ErrorCode.ENTRY_NOT_FOUND
    assert run.signals == []
    assert await a.queue_status(sid) == before
    run.complete()


async def test_m4_q13_a_send_now_asked_of_another_instance_keeps_its_expected_revision(
    database_url: str, open_engine, agent: ManualAgent
) -> None:
    """M4, Q13: the expectedRevision given to B travels with the request: the owner refuses a
    stale one (QUEUE_CHANGED, nothing changed), and runs the Send Now at the current one."""
    _pg_only(database_url)
    a, b, _, sid, run = await _running_on_a(open_engine, agent)
    await b.enqueue(PRINCIPAL, sid, "now", None)
    current = (await b.queue_status(sid)).revision
    with pytest.raises(UserFacingError) as refused:
        await within(b.send_now(PRINCIPAL, sid, SendNowScope.ALL, None, current - 1), WAIT)
    assert refused.value.code is ErrorCode.QUEUE_CHANGED
    assert run.signals == []
    assert (await a.queue_status(sid)).revision == current
    result = await within(b.send_now(PRINCIPAL, sid, SendNowScope.ALL, None, current), WAIT)
    assert result.sent_count == 1 and run.signals == [Signal.INTERRUPT]
    (await agent.next_run()).complete()
