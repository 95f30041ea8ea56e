"""Queue rules Q1–Q14 at the engine level, on every store (M3)."""

from __future__ import annotations

import pytest
from engine_helpers import PRINCIPAL, ManualAgent, new_session, settle
from faults import faults_of

from turnqueue.bus import Event
from turnqueue.domain import HoldReason, MessageSource, PauseReason, SendNowScope, TurnStatus
from turnqueue.engine import Engine
from turnqueue.errors import ErrorCode, UserFacingError


async def busy_session(engine: Engine, agent: ManualAgent) -> tuple[str, object]:
    _, session = await new_session(engine)
    admission = await engine.send_message(PRINCIPAL, session.id, "first")
    assert admission.turn is not None
    run = await agent.next_run()
    return session.id, run


async def assert_first_completed_and_second_held(
    engine: Engine, agent: ManualAgent, sid: str
) -> None:
    """Once the turn "first" has ended: it COMPLETED, nothing new runs, "second" still waits."""
    await settle(engine, sid)
    turn = await engine.current_turn(sid)
    assert turn is not None and turn.status is TurnStatus.COMPLETED and turn.prompt == "first"
    assert agent.no_new_run()
    assert [e.content for e in (await engine.queue_status(sid)).entries] == ["second"]


async def enqueue(engine: Engine, sid: str, *contents: str) -> list[str]:
    ids = []
    for content in contents:
        entry, _, _ = await engine.enqueue(PRINCIPAL, sid, content, None)
        ids.append(entry.id)
    return ids


async def test_q1_missing_policy_reads_on_and_explicit_off_survives_restart(
    engine: Engine, open_engine, agent: ManualAgent
) -> None:
    _, session = await new_session(engine)
    assert (await engine.queue_status(session.id)).auto_run is True
    await engine.set_auto_run(PRINCIPAL, session.id, False, None)
    await engine.aclose()
    restarted = await open_engine()
    status = await restarted.queue_status(session.id)
    assert status.auto_run is False and status.pause_reason is PauseReason.USER
    assert status.entries == ()  # survives an empty queue too


async def test_q2_off_lets_the_active_turn_finish_and_holds_the_queue(
    engine: Engine, agent: ManualAgent
) -> None:
    sid, run = await busy_session(engine, agent)
    await enqueue(engine, sid, "second")
    assert (await engine.set_auto_run(PRINCIPAL, sid, False, None)).turn is None
    assert run.signals == []  # never cancels the active turn
    run.complete()
    await assert_first_completed_and_second_held(engine, agent, sid)


async def test_q2_on_starts_the_head_immediately_and_says_so(
    engine: Engine, agent: ManualAgent
) -> None:
    _, session = await new_session(engine)
    await engine.set_auto_run(PRINCIPAL, session.id, False, None)
    await enqueue(engine, session.id, "a", "b")
    turn = (await engine.set_auto_run(PRINCIPAL, session.id, True, None)).turn
    assert turn is not None and turn.prompt == "a"
    assert (await agent.next_run()).prompt == "a"
    status = await engine.queue_status(session.id)
    assert [e.content for e in status.entries] == ["b"] and status.pause_reason is None


async def test_q4_one_entry_per_turn_end_in_fifo_order(engine: Engine, agent: ManualAgent) -> None:
    sid, run = await busy_session(engine, agent)
    await enqueue(engine, sid, "a", "b", "c")
    for expected in ("a", "b", "c"):
        run.complete()
        run = await agent.next_run()
        assert run.prompt == expected
        assert len((await engine.queue_status(sid)).entries) == ord("c") - ord(expected)
    run.complete()
    await settle(engine, sid)
    assert agent.no_new_run()


async def test_q5_send_now_runs_the_entry_first_then_fifo(
    engine: Engine, agent: ManualAgent
) -> None:
    sid, run = await busy_session(engine, agent)
    _a, b, _c = await enqueue(engine, sid, "A", "B", "C")
    await engine.set_auto_run(PRINCIPAL, sid, False, None)
    result = await engine.send_now(PRINCIPAL, sid, SendNowScope.ENTRY, b, None)
    assert result.sent_count == 1 and result.turn is not None and result.turn.prompt == "B"
    assert run.signals  # the active turn was replaced
    replaced = (await engine.turns_of(sid, 2))[0]
    assert replaced.status is TurnStatus.CANCELLED
    status = await engine.queue_status(sid)
    assert status.auto_run is True  # Send Now resumes
    order = []
    for _ in range(3):
        run = await agent.next_run()
        order.append(run.prompt)
        run.complete()
    assert order == ["B", "A", "C"]


async def test_q5_c1_send_now_over_a_running_turn_is_three_transactions(
    engine: Engine, agent: ManualAgent
) -> None:
    """Q5, C1, Q9: Send Now over a running turn writes three transactions: the claim, which
    takes the replacement's CANCELLING hold with it (the session is cancellation-pending from
    the claim's commit on); the stopped turn's end; the delivery, which ends the hold with it.
    Watched from the bus: pending turns true in the claim's queue revision and false in the
    delivery's, and nothing else starts between them."""
    sid, _run = await busy_session(engine, agent)
    (b,) = await enqueue(engine, sid, "B")
    faults = faults_of(engine)
    seen: list[Event] = []
    engine.bus.add_listener(lambda e: seen.append(e) if e.session_id == sid else None)
    first = len(faults.writes)
    result = await engine.send_now(PRINCIPAL, sid, SendNowScope.ENTRY, b, None)
    # Units of work on a session begin with its lock row; the cluster's own sweeps do not.
    writes = [sorted(called) for called in faults.writes[first:] if "lock" in called]
    assert len(writes) == 3, writes
    assert result.turn is not None and result.turn.prompt == "B"
    pending = [e.cancellation.pending for e in seen if e.cancellation is not None]
    assert pending == [True, False]
    status = await engine.queue_status(sid)
    assert status.held_by == (HoldReason.BUSY,) and not (await engine.cancellation(sid)).pending
    assert (await agent.next_run()).prompt == "B"


async def test_q5_send_now_all_joins_entries_with_blank_lines(
    engine: Engine, agent: ManualAgent
) -> None:
    sid, _run = await busy_session(engine, agent)
    await enqueue(engine, sid, "A", "B")
    result = await engine.send_now(PRINCIPAL, sid, SendNowScope.ALL, None, None)
    assert result.sent_count == 2 and result.turn is not None
    assert result.turn.prompt == "A\n\nB"
    assert (await engine.queue_status(sid)).entries == ()


@pytest.mark.parametrize(
    ("scope", "use_entry", "message"),
    [
        (SendNowScope.ENTRY, False, "scope ENTRY needs entryId"),
        (SendNowScope.ALL, True, "scope ALL takes no entryId"),
    ],
)
async def test_q5_wrong_use_of_entry_id_is_invalid_input(
    engine: Engine, scope: SendNowScope, use_entry: bool, message: str
) -> None:
    _, session = await new_session(engine)
    entry_id = "00000000-0000-4000-8000-000000000000" if use_entry else None
    with pytest.raises(UserFacingError) as info:
        await engine.send_now(PRINCIPAL, session.id, scope, entry_id, None)
    assert (info.value.code, info.value.message, info.value.field) == (
        ErrorCode.INVALID_INPUT,
        message,
        ["entryId"],
    )


async def test_q5_failed_claim_leaves_policy_and_queue_as_they_were(
    engine: Engine, agent: ManualAgent
) -> None:
    sid, run = await busy_session(engine, agent)
    (a,) = await enqueue(engine, sid, "A")
    await engine.set_auto_run(PRINCIPAL, sid, False, None)
    before = await engine.queue_status(sid)
    with pytest.raises(UserFacingError) as info:
        await engine.send_now(
            PRINCIPAL, sid, SendNowScope.ENTRY, "00000000-0000-4000-8000-000000000000", None
        )
    assert info.value.code is ErrorCode.ENTRY_NOT_FOUND
    with pytest.raises(UserFacingError) as info:
        await engine.send_now(PRINCIPAL, sid, SendNowScope.ENTRY, a, before.revision - 1)
    assert info.value.code is ErrorCode.QUEUE_CHANGED
    after = await engine.queue_status(sid)
    assert after == before
    assert run.signals == []


async def test_q5_send_now_on_an_empty_queue_is_queue_empty(engine: Engine) -> None:
    _, session = await new_session(engine)
    with pytest.raises(UserFacingError) as info:
        await engine.send_now(PRINCIPAL, session.id, SendNowScope.ALL, None, None)
    assert (info.value.code, info.value.message) == (ErrorCode.QUEUE_EMPTY, "the queue is empty")


async def test_q6_drain_sets_auto_run_and_starts_one_head(
    engine: Engine, agent: ManualAgent
) -> None:
    _, session = await new_session(engine)
    await engine.set_auto_run(PRINCIPAL, session.id, False, None)
    assert (await engine.drain(PRINCIPAL, session.id, None)).turn is None  # empty: not drained
    assert (await engine.queue_status(session.id)).auto_run is True
    await engine.set_auto_run(PRINCIPAL, session.id, False, None)
    await enqueue(engine, session.id, "a", "b")
    turn, queue = await engine.drain(PRINCIPAL, session.id, None)
    assert turn is not None and turn.prompt == "a"
    assert queue.auto_run and [e.content for e in queue.entries] == ["b"]
    with pytest.raises(UserFacingError) as info:
        await engine.drain(PRINCIPAL, session.id, None)
    assert info.value.code is ErrorCode.SESSION_BUSY


async def test_q7_explicit_cancel_with_backlog_pauses_with_reason_cancel(
    engine: Engine, agent: ManualAgent
) -> None:
    sid, _run = await busy_session(engine, agent)
    await enqueue(engine, sid, "next")
    result = await engine.cancel(PRINCIPAL, sid)
    assert result.outcome.value == "STOPPED"
    status = await engine.queue_status(sid)
    assert status.auto_run is False and status.pause_reason is PauseReason.CANCEL
    assert [e.content for e in status.entries] == ["next"]
    await settle(engine, sid)
    assert agent.no_new_run()


async def test_q7_explicit_cancel_without_backlog_keeps_auto_run(
    engine: Engine, agent: ManualAgent
) -> None:
    sid, _ = await busy_session(engine, agent)
    await engine.cancel(PRINCIPAL, sid)
    status = await engine.queue_status(sid)
    assert status.auto_run is True and status.pause_reason is None


async def test_q8_restoring_entries_never_writes_the_policy(
    engine: Engine, open_engine, agent: ManualAgent
) -> None:
    _, session = await new_session(engine)
    await engine.set_auto_run(PRINCIPAL, session.id, False, None)
    (a,) = await enqueue(engine, session.id, "a")
    async with engine.store.transaction() as tx:  # a reservation the server "crashes" in
        await tx.lock(session.id)
        await tx.claim_entries(session.id, [a])
    await engine.aclose()
    restarted = await open_engine()
    status = await restarted.queue_status(session.id)
    assert [e.id for e in status.entries] == [a]
    assert status.auto_run is False and status.pause_reason is PauseReason.USER


async def test_q9_clarification_holds_delivery_even_with_auto_run_on(
    engine: Engine, agent: ManualAgent
) -> None:
    sid, run = await busy_session(engine, agent)
    await enqueue(engine, sid, "later")
    run.complete(clarification="which one?")
    await settle(engine, sid)
    status = await engine.queue_status(sid)
    assert status.auto_run is True and "CLARIFICATION" in status.held_by
    assert agent.no_new_run()
    with pytest.raises(UserFacingError) as info:
        await engine.send_message(PRINCIPAL, sid, "hello")
    assert info.value.code is ErrorCode.CLARIFICATION_PENDING
    await engine.answer_clarification(PRINCIPAL, sid, "the red one", None)
    answer = await agent.next_run()
    assert answer.prompt == "the red one"
    answer.complete()
    assert (await agent.next_run()).prompt == "later"


async def test_q9_busy_is_listed_in_held_by(engine: Engine, agent: ManualAgent) -> None:
    sid, _ = await busy_session(engine, agent)
    assert (await engine.queue_status(sid)).held_by == ("BUSY",)


async def test_q10_send_now_delivery_failure_returns_entries_with_their_ids(
    engine: Engine, agent: ManualAgent
) -> None:
    _, session = await new_session(engine)
    await engine.set_auto_run(PRINCIPAL, session.id, False, None)
    a, b = await enqueue(engine, session.id, "a", "b")
    # The delivery of the claimed entry fails (in its transaction, after the claim committed).

    async def failing(session_id: str, entry_ids: list[str]) -> None:
        raise RuntimeError("delivery failed")

    with faults_of(engine).before("count_in_flight", failing), pytest.raises(RuntimeError):
        await engine.send_now(PRINCIPAL, session.id, SendNowScope.ENTRY, b, None)
    status = await engine.queue_status(session.id)
    assert [e.id for e in status.entries] == [b, a]
    assert status.auto_run is True  # Q5: from the claim on, auto-run stays ON


async def test_c5_q10_a_failed_replacement_releases_the_reference_it_took_with_its_claim(
    engine: Engine, agent: ManualAgent
) -> None:
    """C5, Q10: Send Now over a running turn takes its CANCELLING reference with the claim;
    when the delivery then fails (its transaction rolls back, so it ends nothing), the
    entries come back and the reference is released on its own: nothing stays pending."""
    sid, _run = await busy_session(engine, agent)
    (b,) = await enqueue(engine, sid, "B")

    async def failing(session_id: str, entry_ids: list[str]) -> None:
        raise RuntimeError("delivery failed")

    with faults_of(engine).before("count_in_flight", failing), pytest.raises(RuntimeError):
        await engine.send_now(PRINCIPAL, sid, SendNowScope.ENTRY, b, None)
    status = await engine.queue_status(sid)
    assert [e.id for e in status.entries] == [b]
    assert HoldReason.CANCELLING not in status.held_by
    assert not (await engine.cancellation(sid)).pending


async def test_q10_in_flight_entries_come_back_after_a_crash(
    engine: Engine, open_engine, agent: ManualAgent
) -> None:
    _, session = await new_session(engine)
    await engine.set_auto_run(PRINCIPAL, session.id, False, None)
    a, b, c = await enqueue(engine, session.id, "a", "b", "c")
    async with engine.store.transaction() as tx:
        await tx.lock(session.id)
        await tx.claim_entries(session.id, [b, c])
    assert [e.id for e in (await engine.queue_status(session.id)).entries] == [a]
    await engine.aclose()
    restarted = await open_engine()
    assert [e.id for e in (await restarted.queue_status(session.id)).entries] == [b, c, a]


async def test_q11_capacity_names_size_and_limit(engine: Engine) -> None:
    _, session = await new_session(engine)
    await engine.set_auto_run(PRINCIPAL, session.id, False, None)
    await enqueue(engine, session.id, *[f"m{i}" for i in range(10)])
    before = await engine.queue_status(session.id)
    with pytest.raises(UserFacingError) as info:
        await engine.enqueue(PRINCIPAL, session.id, "one too many", None)
    assert info.value.code is ErrorCode.QUEUE_FULL
    assert "10" in info.value.message
    assert await engine.queue_status(session.id) == before


async def test_q11_restoration_is_never_refused_for_capacity(engine: Engine, open_engine) -> None:
    _, session = await new_session(engine)
    await engine.set_auto_run(PRINCIPAL, session.id, False, None)
    ids = await enqueue(engine, session.id, *[f"m{i}" for i in range(10)])
    async with engine.store.transaction() as tx:
        await tx.lock(session.id)
        await tx.claim_entries(session.id, ids[:1])
    await engine.enqueue(PRINCIPAL, session.id, "fills the freed place", None)
    await engine.aclose()
    restarted = await open_engine()
    assert (await restarted.queue_status(session.id)).count == 11


async def test_q12_managing_entries(engine: Engine) -> None:
    _, session = await new_session(engine)
    sid = session.id
    await engine.set_auto_run(PRINCIPAL, sid, False, None)
    a, b, c = await enqueue(engine, sid, "a", "b", "c")
    status = await engine.update_entry(PRINCIPAL, sid, b, "b2", None)
    assert [e.content for e in status.entries] == ["a", "b2", "c"]
    status = await engine.reorder_queue(PRINCIPAL, sid, [c, a, b], None)
    assert [e.id for e in status.entries] == [c, a, b]
    assert [e.position for e in status.entries] == [1, 2, 3]
    with pytest.raises(UserFacingError) as info:
        await engine.reorder_queue(PRINCIPAL, sid, [c, a], None)
    assert info.value.code is ErrorCode.QUEUE_CHANGED
    status = await engine.remove_entry(PRINCIPAL, sid, a, None)
    assert [e.id for e in status.entries] == [c, b]
    with pytest.raises(UserFacingError) as info:
        await engine.remove_entry(PRINCIPAL, sid, a, None)
    assert info.value.code is ErrorCode.ENTRY_NOT_FOUND
    status = await engine.clear_queue(PRINCIPAL, sid, None)
    assert status.entries == ()


async def test_q12_only_user_entries_are_editable(engine: Engine) -> None:
    _, session = await new_session(engine)
    await engine.set_auto_run(PRINCIPAL, session.id, False, None)
    entry, _, _ = await engine.queue.enqueue(
        session.id, "from the agent", None, MessageSource.AGENT
    )
    with pytest.raises(UserFacingError) as info:
        await engine.update_entry(PRINCIPAL, session.id, entry.id, "edited", None)
    assert info.value.code is ErrorCode.NOT_EDITABLE


async def test_q12_in_flight_entries_are_hidden_and_untouchable(engine: Engine) -> None:
    _, session = await new_session(engine)
    await engine.set_auto_run(PRINCIPAL, session.id, False, None)
    (a,) = await enqueue(engine, session.id, "a")
    async with engine.store.transaction() as tx:
        await tx.lock(session.id)
        await tx.claim_entries(session.id, [a])
    for call in (
        engine.update_entry(PRINCIPAL, session.id, a, "x", None),
        engine.remove_entry(PRINCIPAL, session.id, a, None),
    ):
        with pytest.raises(UserFacingError) as info:
            await call
        assert info.value.code is ErrorCode.ENTRY_NOT_FOUND


async def test_q13_every_change_bumps_and_stale_expected_revision_changes_nothing(
    engine: Engine,
) -> None:
    _, session = await new_session(engine)
    sid = session.id
    revisions = [(await engine.queue_status(sid)).revision]
    await engine.set_auto_run(PRINCIPAL, sid, False, None)
    revisions.append((await engine.queue_status(sid)).revision)
    (a,) = await enqueue(engine, sid, "a")
    revisions.append((await engine.queue_status(sid)).revision)
    await engine.update_entry(PRINCIPAL, sid, a, "a2", revisions[-1])
    revisions.append((await engine.queue_status(sid)).revision)
    assert revisions == sorted(set(revisions))
    before = await engine.queue_status(sid)
    for call in (
        engine.enqueue(PRINCIPAL, sid, "b", revisions[0]),
        engine.set_auto_run(PRINCIPAL, sid, True, revisions[0]),
        engine.clear_queue(PRINCIPAL, sid, revisions[0]),
        engine.remove_entry(PRINCIPAL, sid, a, revisions[0]),
        engine.drain(PRINCIPAL, sid, revisions[0]),
    ):
        with pytest.raises(UserFacingError) as info:
            await call
        assert info.value.code is ErrorCode.QUEUE_CHANGED
    assert await engine.queue_status(sid) == before


async def test_q14_pause_reason_user(engine: Engine) -> None:
    _, session = await new_session(engine)
    await engine.set_auto_run(PRINCIPAL, session.id, False, None)
    assert (await engine.queue_status(session.id)).pause_reason is PauseReason.USER
    await engine.set_auto_run(PRINCIPAL, session.id, True, None)
    assert (await engine.queue_status(session.id)).pause_reason is None


async def test_s3_bad_content_is_invalid_input_and_changes_nothing(engine: Engine) -> None:
    _, session = await new_session(engine)
    before = await engine.queue_status(session.id)
    for content in ("", "   ", "x" * 100_001):
        with pytest.raises(UserFacingError) as info:
            await engine.enqueue(PRINCIPAL, session.id, content, None)
        assert info.value.code is ErrorCode.INVALID_INPUT
    with pytest.raises(UserFacingError) as info:
        await engine.enqueue(PRINCIPAL, "not-an-id", "x", None)
    assert info.value.code is ErrorCode.INVALID_INPUT
    with pytest.raises(UserFacingError) as info:
        await engine.enqueue("mallory", session.id, "x", None)
    assert info.value.code is ErrorCode.NOT_FOUND
    assert await engine.queue_status(session.id) == before


async def test_q9_q4_an_unreadable_workflow_guard_records_the_end_and_holds_the_queue(
    engine: Engine, agent: ManualAgent
) -> None:
    """Q9: a guard that cannot be checked holds: when the workflow step cannot be read at a
    turn's end, the end is still recorded (COMPLETED) and the next entry is not started."""
    sid, run = await busy_session(engine, agent)
    await enqueue(engine, sid, "second")

    async def unreadable(session_id: str) -> bool:
        raise RuntimeError("the database is gone")

    engine.turns.moves_on_complete = unreadable
    run.complete()
    await assert_first_completed_and_second_held(engine, agent, sid)
