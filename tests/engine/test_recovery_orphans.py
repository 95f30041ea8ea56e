"""Recovery (M6) of each kind of orphan a dead process leaves, one at a time (Q7, Q10, O1).

The dead process's leftovers are what its crash leaves in the database: a RUNNING turn, a
session left RUNNING with no turn, entries it had claimed (in flight), a Q7 cancel mark, an
agent process group. Some are written straight into the store, as the dead process would have
left them, when no public operation stops exactly there. Written against the survivors of a
mutation run of ``engine/recovery.py`` (``tests/MUTANTS.md``).
"""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys

import pytest
from engine_helpers import PRINCIPAL, WAIT, ManualAgent, new_session

from turnqueue.domain import HoldReason, MessageSource, PauseReason, SessionState, TurnStatus
from turnqueue.engine import Engine


async def crash(engine: Engine) -> None:
    """The process dies: its runtime forgets everything, the database keeps what it wrote
    (on PostgreSQL its instance row goes too, as when its lease expires, M4)."""
    engine.core.closing = True
    engine.core.runners.clear()
    if engine.core.cluster is not None:
        await engine.core.cluster.aclose()


async def cancel_mark(engine: Engine, sid: str) -> str | None:
    async with engine.core.store.read() as tx:
        view = await tx.view(sid)
    assert view is not None
    return view.cancel_mark


def bury(agent: ManualAgent) -> None:
    for run in agent.runs:
        run.fail("process died")


async def ghost_turn(engine: Engine, sid: str, prompt: str = "ghost") -> str:
    """A RUNNING turn of this (soon dead) instance that no agent runs."""
    async with engine.core.store.transaction() as tx:
        await tx.lock(sid)
        turn = await tx.start_turn(
            sid, prompt=prompt, source=MessageSource.USER, owner=engine.core.instance
        )
    return turn.id


async def test_m6_o1_an_interrupted_turn_keeps_the_output_its_log_committed(
    engine: Engine, open_engine, agent: ManualAgent
) -> None:
    """M6/O1: the turn a crash interrupted ends FAILED ("interrupted") with the output its
    durable log had committed, not an empty one."""
    _, session = await new_session(engine)
    sid = session.id
    await engine.send_message(PRINCIPAL, sid, "work")
    run = await agent.next_run()
    run.emit(" and more")
    runner = engine.core.runners[sid]
    for _ in range(int(WAIT / 0.02)):  # the flusher commits the streamed text on its own
        async with engine.core.store.read() as tx:
            if await tx.output_text(runner.turn.id) == "echo:work and more":
                break
        await asyncio.sleep(0.02)
    await crash(engine)
    restarted = await open_engine(agent_=ManualAgent())
    turn = await restarted.current_turn(sid)
    assert turn is not None
    assert (turn.status, turn.error, turn.output) == (
        TurnStatus.FAILED,
        "interrupted",
        "echo:work and more",
    )
    bury(agent)


async def test_m6_a_session_left_busy_without_a_turn_waits_for_input(
    database_url: str, engine: Engine, open_engine
) -> None:
    """M6: a session left RUNNING or STARTING with no running turn (the process died between
    the two writes) waits for input after a restart on SQLite, where nothing else can be
    mid-way at start-up (on PostgreSQL only once a lease has passed: another instance may be
    starting it); a message then starts at once."""
    if not database_url.startswith("sqlite"):
        pytest.skip("on PostgreSQL a session is stuck only after a lease (M4)")
    sids = []
    for state in (SessionState.RUNNING, SessionState.STARTING):
        _, session = await new_session(engine)
        async with engine.core.store.transaction() as tx:
            await tx.lock(session.id)
            await tx.set_session_state(session.id, state)
        sids.append(session.id)
    await crash(engine)
    second = ManualAgent()
    restarted = await open_engine(agent_=second)
    for sid in sids:
        after = await restarted.session(PRINCIPAL, sid)
        assert after is not None and after.state is SessionState.WAITING_FOR_INPUT
    admission = await restarted.send_message(PRINCIPAL, sids[0], "hello")
    assert admission.turn is not None
    (await second.next_run()).complete()


async def test_q10_m6_entries_a_dead_instance_claimed_return_to_the_head_with_their_ids(
    engine: Engine, open_engine
) -> None:
    """Q10/M6: entries the dead process had claimed (in flight, e.g. a Send Now's) come back
    at the head of their queue, with their ids, ahead of those that waited; a paused queue
    stays paused."""
    _, session = await new_session(engine)
    sid = session.id
    await engine.set_auto_run(PRINCIPAL, sid, False, None)
    entries = [(await engine.enqueue(PRINCIPAL, sid, c, None))[0] for c in ("A", "B", "C")]
    async with engine.core.store.transaction() as tx:
        await tx.lock(sid)
        await tx.claim_entries(sid, [entries[1].id], owner=engine.core.instance)
    assert [e.content for e in (await engine.queue_status(sid)).entries] == ["A", "C"]
    await crash(engine)
    second = ManualAgent()
    restarted = await open_engine(agent_=second)
    status = await restarted.queue_status(sid)
    assert [(e.id, e.content) for e in status.entries] == [
        (entries[1].id, "B"),
        (entries[0].id, "A"),
        (entries[2].id, "C"),
    ]
    assert status.auto_run is False and second.no_new_run()


async def test_q7_m6_a_dead_owners_cancel_parks_entries_it_had_in_flight(
    engine: Engine, open_engine, agent: ManualAgent
) -> None:
    """Q7/M6: an explicit cancel accepted (its durable mark) by an owner that died with the
    queue empty but an entry in flight parks that entry once recovery returns it: the
    backlog counted is what is queued after the release."""
    _, session = await new_session(engine)
    sid = session.id
    await engine.set_auto_run(PRINCIPAL, sid, False, None)
    await engine.enqueue(PRINCIPAL, sid, "claimed", None)
    await engine.set_auto_run(PRINCIPAL, sid, True, None)  # the entry starts a turn...
    turn = await engine.current_turn(sid)
    assert turn is not None and turn.prompt == "claimed"
    await crash(engine)
    async with engine.core.store.transaction() as tx:  # ...and a Send Now had claimed one more
        await tx.lock(sid)
        claimed = await tx.add_entry(sid, content="in flight", source=MessageSource.USER)
        await tx.claim_entries(sid, [claimed.id], owner=engine.core.instance)
        await tx.set_cancel_mark(sid, turn.id)
    second = ManualAgent()
    restarted = await open_engine(agent_=second)
    status = await restarted.queue_status(sid)
    assert [e.content for e in status.entries] == ["in flight"]
    assert (status.auto_run, status.pause_reason) == (False, PauseReason.CANCEL)
    assert second.no_new_run()
    assert await cancel_mark(restarted, sid) is None  # decided: a later recovery parks nothing
    bury(agent)


async def test_q7_m6_a_dead_owners_cancel_with_nothing_queued_leaves_auto_run_on(
    engine: Engine, open_engine
) -> None:
    """Q7/M6: with no backlog there is nothing to park: the mark is cleared, auto-run stays
    ON with no pause reason, and the next message starts at once."""
    _, session = await new_session(engine)
    sid = session.id
    turn_id = await ghost_turn(engine, sid)
    async with engine.core.store.transaction() as tx:
        await tx.lock(sid)
        await tx.set_cancel_mark(sid, turn_id)
    await crash(engine)
    second = ManualAgent()
    restarted = await open_engine(agent_=second)
    status = await restarted.queue_status(sid)
    assert (status.auto_run, status.pause_reason) == (True, None)
    assert await cancel_mark(restarted, sid) is None
    admission = await restarted.send_message(PRINCIPAL, sid, "next")
    assert admission.turn is not None
    (await second.next_run()).complete()


async def test_c5_q9_m6_a_hold_a_dead_instance_left_alone_is_dropped(
    engine: Engine, open_engine
) -> None:
    """C5/Q9/M6: a cancel's hold that a dead instance left with nothing else behind it (no
    turn, no claimed entry, no Q7 mark) is dropped by recovery: no cancellation stays pending
    and nothing holds the queue (the ``| held`` of ``recover``'s sessions to recover)."""
    _, session = await new_session(engine)
    sid = session.id
    async with engine.core.store.transaction() as tx:
        await tx.lock(sid)
        await tx.change_hold(sid, engine.core.instance, HoldReason.CANCELLING, 1)
    assert (await engine.cancellation(sid)).pending
    await crash(engine)
    restarted = await open_engine()
    assert not (await restarted.cancellation(sid)).pending
    assert HoldReason.CANCELLING not in (await restarted.queue_status(sid)).held_by


def _process_group() -> subprocess.Popen[bytes]:
    """A stand-in for a dead server's agent: a process leading a process group of its own."""
    return subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True
    )


async def test_m6_the_agent_process_groups_a_dead_server_left_are_killed_on_its_host(
    engine: Engine, open_engine
) -> None:
    """M6: every process group a dead instance recorded on this host — running a turn or idle
    — is SIGKILLed and forgotten; one recorded for another host is left alone; a group that is
    already gone is no error."""
    procs = {}
    for where in ("here", "elsewhere", "gone"):
        _, session = await new_session(engine)
        await ghost_turn(engine, session.id, where)
        proc = procs[where] = _process_group()
        host = socket.gethostname() if where != "elsewhere" else "another-host.invalid"
        async with engine.core.store.transaction() as tx:
            await tx.record_process(host, proc.pid, engine.core.instance, session.id)
    procs["gone"].kill()
    procs["gone"].wait()
    try:
        await crash(engine)
        restarted = await open_engine(agent_=ManualAgent())
        assert await asyncio.to_thread(procs["here"].wait, WAIT) == -9  # SIGKILL
        assert procs["elsewhere"].poll() is None
        async with restarted.core.store.read() as tx:
            assert (await tx.orphans(set(), host=socket.gethostname(), grace=0)).processes == []
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()


async def test_q7_m6_a_finished_cancels_park_is_not_repeated_by_a_later_recovery(
    engine: Engine, open_engine, agent: ManualAgent
) -> None:
    """Q7/M6: the explicit cancel's durable mark is cleared in the transaction that parks the
    backlog, so once the user resumes, a crash of the next turn is recovered like any other:
    the queue runs on (auto-run ON), it is not parked again for the old cancel."""
    _, session = await new_session(engine)
    sid = session.id
    await engine.send_message(PRINCIPAL, sid, "work")
    await agent.next_run()
    for content in ("A", "B"):
        await engine.enqueue(PRINCIPAL, sid, content, None)
    await engine.cancel(PRINCIPAL, sid)
    parked = await engine.queue_status(sid)
    assert (parked.auto_run, parked.pause_reason) == (False, PauseReason.CANCEL)
    await engine.set_auto_run(PRINCIPAL, sid, True, None)  # the user resumes: A runs
    assert (await agent.next_run()).prompt == "A"
    await crash(engine)
    second = ManualAgent()
    restarted = await open_engine(agent_=second)
    assert (await second.next_run()).prompt == "B"
    status = await restarted.queue_status(sid)
    assert (status.auto_run, status.pause_reason) == (True, None)
    bury(agent)
