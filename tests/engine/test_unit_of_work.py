"""The per-session unit of work (``Core.change``) and the runtime hold (``Core.hold``)."""

from __future__ import annotations

import pytest
from engine_helpers import PRINCIPAL, ManualAgent, new_session, next_event
from engine_probes import add_hold
from faults import faults_of

from turnqueue.api import build_schema
from turnqueue.bus import Event, EventKind
from turnqueue.domain import CancelKind, HoldReason, MessageSource, SessionState
from turnqueue.engine import Engine
from turnqueue.errors import Conflict, ErrorCode
from turnqueue.resolvers.context import Context
from turnqueue.timeouts import within


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
    with engine.bus.subscribe(sid, [EventKind.QUEUE, EventKind.SESSION]) as sub:
        async with engine.core.change(sid) as c:
            first = await c.queue_changed()
            second = await c.queue_changed()
        assert first == second == before.revision + 1
        event = await next_event(sub, EventKind.QUEUE)
        assert event.revision == first  # type: ignore[attr-defined]
        with pytest.raises(RuntimeError):
            async with engine.core.change(sid) as c:
                await c.queue_changed()
                await c.tx.set_session_state(sid, SessionState.COMPLETED)
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
    with engine.bus.subscribe(sid, [EventKind.SESSION]) as sub:
        await engine.send_message(PRINCIPAL, sid, "hello")
        started = await next_event(sub, EventKind.SESSION)
        running = await engine.authorize_session(PRINCIPAL, sid)
        assert started.revision == running.revision > session.revision  # type: ignore[attr-defined]
        (await agent.next_run()).complete()
        ended = await next_event(sub, EventKind.SESSION)
        waiting = await engine.authorize_session(PRINCIPAL, sid)
        assert ended.revision == waiting.revision > running.revision  # type: ignore[attr-defined]


async def test_r1_a_session_revision_moved_through_tx_unreported_is_still_announced(
    engine: Engine,
) -> None:
    """R1, R3: a write through ``c.tx`` that moves the session revision, which the rule did not
    say (``Change.session_changed``), or moved again after it did, is announced at the end of
    the body with the revision the store answered: one session event carries the revision the
    transaction committed."""
    _, session = await new_session(engine)
    sid = session.id
    with engine.bus.subscribe(sid, [EventKind.SESSION]) as sub:
        async with engine.core.change(sid) as c:
            await c.tx.bump_session(sid)  # not said
        first = await next_event(sub, EventKind.SESSION)
        assert first.revision == (await engine.authorize_session(PRINCIPAL, sid)).revision
        assert first.revision == session.revision + 1  # type: ignore[attr-defined]
        async with engine.core.change(sid) as c:
            await c.tx.bump_session(sid)
            c.session_changed()  # said
            await c.tx.bump_session(sid)  # then moved again, not said
        second = await next_event(sub, EventKind.SESSION)
        assert second.revision == first.revision + 2  # type: ignore[attr-defined]
        assert second.revision == (await engine.authorize_session(PRINCIPAL, sid)).revision


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
    assert (await engine.queue_status(sid)).held_by == ()


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
        await within(agent.next_run(), 0.2)
    assert (await engine.current_turn(sid)) is None
    await engine.send_message(PRINCIPAL, sid, "now")  # the ordinary path does launch
    assert (await agent.next_run()).prompt == "now"


async def test_q13_a_watched_queue_event_carries_the_status_its_transaction_committed(
    engine: Engine, agent: ManualAgent
) -> None:
    """Q13, P8: with a subscriber of the session's queue here, the unit of work reads the
    status once before COMMIT and its event carries it: exactly the state of that revision
    (entries, policy and the holds recorded with it), so no subscriber reads it again. A turn
    started in the same transaction shows as BUSY with its entry gone."""
    _, session = await new_session(engine)
    sid = session.id
    await engine.set_auto_run(PRINCIPAL, sid, False, None)
    await engine.enqueue(PRINCIPAL, sid, "first", None)
    await engine.enqueue(PRINCIPAL, sid, "second", None)
    with engine.bus.subscribe(sid, [EventKind.QUEUE]) as sub:
        applied = await engine.set_auto_run(PRINCIPAL, sid, True, None)
        event = await next_event(sub, EventKind.QUEUE)
        carried = event.queue  # type: ignore[attr-defined]
        assert carried is not None and carried == applied.queue
        assert carried.revision == event.revision  # type: ignore[attr-defined]
        assert carried == await engine.queue_status(sid)  # what a fresh read says
        assert carried.auto_run and HoldReason.BUSY in carried.held_by
        assert [e.content for e in carried.entries] == ["second"]
        assert applied.turn is not None and applied.turn.prompt == "first"
        with pytest.raises(TimeoutError):  # policy and start: one transaction, one revision
            await next_event(sub, EventKind.QUEUE, timeout=0.2)
    assert (await agent.next_run()).prompt == "first"


async def test_q13_an_unwatched_queue_event_carries_no_status(
    engine: Engine, agent: ManualAgent
) -> None:
    """P8: nobody here watches the queue and nobody asks for its status (a turn's end): the
    unit of work reads no status it would throw away, and the event is thin. (A mutation
    answers the status, so its event carries the one it read.)"""
    _, session = await new_session(engine)
    sid = session.id
    await engine.send_message(PRINCIPAL, sid, "x")
    run = await agent.next_run()
    with engine.bus.subscribe(sid, [EventKind.SESSION]) as sub:  # the session, not its queue
        seen: list[Event] = []
        engine.bus.add_listener(seen.append)
        run.complete()
        await next_event(sub, EventKind.SESSION)
    queue_events = [e for e in seen if e.kind is EventKind.QUEUE and e.session_id == sid]
    assert queue_events and all(e.queue is None for e in queue_events)


async def test_q2_q13_a_mutation_answers_the_status_its_own_transaction_committed(
    engine: Engine,
) -> None:
    """Q13: a queue mutation's answer is the status its transaction committed (read before
    COMMIT), changed or not: an edit's revision is its own, a no-op answers the current one."""
    _, session = await new_session(engine)
    sid = session.id
    off = await engine.set_auto_run(PRINCIPAL, sid, False, None)
    assert off.queue == await engine.queue_status(sid) and not off.queue.auto_run
    entry, _, _ = await engine.enqueue(PRINCIPAL, sid, "a", None)
    again = await engine.set_auto_run(PRINCIPAL, sid, False, None)  # no change
    assert again.queue.revision == off.queue.revision + 1  # the enqueue's
    assert again.queue == await engine.queue_status(sid)
    edited = await engine.update_entry(PRINCIPAL, sid, entry.id, "b", None)
    assert edited.revision == again.queue.revision + 1
    assert (
        [e.content for e in edited.entries]
        == ["b"]
        == [e.content for e in (await engine.queue_status(sid)).entries]
    )


async def test_q13_r3_send_message_answers_the_session_and_queue_its_own_commit_left(
    engine: Engine, agent: ManualAgent
) -> None:
    """Q13, R3: sendMessage answers, in its one engine call, the session and queue status its
    own transaction committed, not what another client changed right after: here a
    ``setAutoRun(false)`` that commits between the send's COMMIT and the answer (it takes no
    session lock), once after a send that starts a turn and once after one that queues."""
    _, session = await new_session(engine)
    sid = session.id
    offs: list[int] = []

    async def off_right_after() -> None:
        offs.append((await engine.set_auto_run(PRINCIPAL, sid, False, None)).queue.revision)

    with faults_of(engine).after_commit("start_turn", off_right_after):
        started = await engine.send_message(PRINCIPAL, sid, "a")
    assert started.turn is not None and started.session is not None and started.queue is not None
    assert started.session.state is SessionState.RUNNING
    assert started.queue.auto_run and started.queue.revision < offs[0]
    assert started.session == await engine.authorize_session(PRINCIPAL, sid)
    await agent.next_run()

    await engine.set_auto_run(PRINCIPAL, sid, True, None)
    with faults_of(engine).after_commit("add_entry", off_right_after):
        queued = await engine.send_message(PRINCIPAL, sid, "b", "key-b")
    assert queued.entry is not None and queued.queue is not None and queued.session is not None
    assert queued.queue.auto_run and queued.queue.revision == offs[1] - 1
    assert [e.content for e in queued.queue.entries] == ["b"]
    now = await engine.queue_status(sid)
    assert not now.auto_run and now.entries == queued.queue.entries
    replayed = await engine.send_message(PRINCIPAL, sid, "b", "key-b")  # Q15: a retry
    assert replayed.entry == queued.entry and replayed.queue == now


async def test_q9_w1_a_step_change_ending_does_not_release_another_ones_hold(
    engine: Engine,
) -> None:
    """Q9: WORKFLOW_TRANSITION is held by reference: a step change that ends (a manual move)
    while another still holds the queue (a completion's move, handed over) leaves it held."""
    _, session = await new_session(engine)
    sid = session.id
    transition = HoldReason.WORKFLOW_TRANSITION
    await add_hold(engine, sid, transition)  # a completion's move, pending
    async with engine.core.hold(sid):  # a manual move meanwhile
        assert transition in (await engine.queue_status(sid)).held_by
    assert transition in (await engine.queue_status(sid)).held_by
    await engine.core.release_hold(sid, transition)
    assert (await engine.queue_status(sid)).held_by == ()


QUEUE_ANSWERS = {
    "enqueueMessage": (
        'enqueueMessage(input: {sessionId: $s, content: "b"})',
        "add_entry",
    ),
    "drain": ("drain(input: {sessionId: $s})", "start_turn"),  # its second, last commit
    "sendNow": ("sendNow(input: {sessionId: $s, scope: ALL})", "start_turn"),
}


@pytest.mark.parametrize("mutation", sorted(QUEUE_ANSWERS))
async def test_q13_r3_queue_mutations_answer_the_queue_their_own_commit_left(
    engine: Engine, agent: ManualAgent, mutation: str
) -> None:
    """Q13, R3: enqueueMessage, drain and sendNow answer the queue status their own last
    transaction committed, not a read after it: here a ``setAutoRun(false)`` (it takes no
    session lock) commits right after the mutation's commit, before its answer. The answer
    shows auto-run still on, at a revision below the pause's; a read after it would not."""
    settings = engine.core.settings
    _, session = await new_session(engine)
    sid = session.id
    if mutation != "drain":
        await engine.enqueue(PRINCIPAL, sid, "a", None)  # runs: the queue holds what follows
        await agent.next_run()
    if mutation != "enqueueMessage":  # "b" waits, auto-run off, for the drain or Send Now
        await engine.set_auto_run(PRINCIPAL, sid, False, None)
        await engine.enqueue(PRINCIPAL, sid, "b", None)
    field, method = QUEUE_ANSWERS[mutation]
    offs: list[int] = []

    async def off_right_after() -> None:
        offs.append((await engine.set_auto_run(PRINCIPAL, sid, False, None)).queue.revision)

    answer = "userErrors { code } queue { autoRun revision }"
    document = f"mutation($s: ID!) {{ m: {field} {{ {answer} }} }}"
    with faults_of(engine).after_commit(method, off_right_after):
        result = await build_schema(settings).execute(
            document, variable_values={"s": sid}, context_value=Context(engine, PRINCIPAL)
        )
    assert result.errors is None, result.errors
    answer = result.data["m"]  # type: ignore[index]
    assert answer["userErrors"] == [] and offs, (answer, offs)
    assert answer["queue"]["autoRun"] is True
    assert answer["queue"]["revision"] < offs[-1]
    assert not (await engine.queue_status(sid)).auto_run
