"""Starting and ending turns (``engine/turns.py``): the lines its mutation run (issue 12) found
unguarded. Each test names the rule it proves; ``tests/MUTANTS.md`` lists the mutants each kills.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

import pytest
from engine_helpers import PRINCIPAL, WAIT, ManualAgent, new_session, settle
from engine_probes import clarification
from faults import faults_of
from test_queue_refusals import refusal
from test_queue_rules import busy_session, enqueue
from test_recovery import crash
from test_workflow_rules import WORKFLOW

from turnqueue.agents import AgentResult, Signal
from turnqueue.bus import EventKind
from turnqueue.domain import (
    AgentErrorKind,
    CancelOutcome,
    MessageSource,
    OutputChunk,
    PauseReason,
    SessionState,
    TurnStatus,
    new_id,
)
from turnqueue.engine import Engine
from turnqueue.errors import ErrorCode, StoreError, UserFacingError
from turnqueue.settings import Settings
from turnqueue.store.tx import SqlTx
from turnqueue.timeouts import within


async def test_q3_q6_a_drain_starts_the_head_even_when_auto_run_went_off_meanwhile(
    engine: Engine, agent: ManualAgent
) -> None:
    """Q3/Q6: ``drain`` is a *targeted* start: it does not read auto-run. When another client's
    ``setAutoRun(false)`` commits between the drain's policy write and its start (set_auto_run
    takes no session lock), the head still starts, and OFF stays for every later entry."""
    _, session = await new_session(engine)
    sid = session.id
    await engine.set_auto_run(PRINCIPAL, sid, False, None)
    await enqueue(engine, sid, "a", "b")

    async def off_first() -> None:  # after the drain's policy write, before its start
        await engine.set_auto_run(PRINCIPAL, sid, False, None)

    with faults_of(engine).after_commit("set_policy_bumped", off_first):
        turn, answered = await engine.drain(PRINCIPAL, sid, None)
    assert turn is not None and turn.prompt == "a"
    assert not answered.auto_run  # its last commit's status: the start, after the pause
    assert (await agent.next_run()).prompt == "a"
    status = await engine.queue_status(sid)
    assert (status.auto_run, status.pause_reason) == (False, PauseReason.USER)
    assert [e.content for e in status.entries] == ["b"]


async def asked(engine: Engine, agent: ManualAgent) -> tuple[str, str]:
    """A session whose turn ended with a question (the clarification pending): (sid, its id)."""
    sid, run = await busy_session(engine, agent)
    run.complete(clarification="which one?")
    await settle(engine, sid)
    question = await clarification(engine, sid)
    assert question is not None
    return sid, question.id


async def test_q9_answer_clarification_without_a_pending_one_is_no_clarification(
    engine: Engine, agent: ManualAgent
) -> None:
    """Q9 (answerClarification): with no clarification pending the answer is refused with
    NO_CLARIFICATION and no field (no id was wrong), and no turn starts."""
    _, session = await new_session(engine)
    with pytest.raises(UserFacingError) as info:
        await engine.answer_clarification(PRINCIPAL, session.id, "red", None)
    error = info.value
    assert (error.code, error.message, error.field) == (
        ErrorCode.NO_CLARIFICATION,
        "no such clarification is pending",
        None,
    )
    assert agent.no_new_run() and await engine.current_turn(session.id) is None


async def test_q9_answer_clarification_names_a_wrong_id_and_takes_the_right_one(
    engine: Engine, agent: ManualAgent
) -> None:
    """Q9 (answerClarification): an answer to another clarification's id is refused with
    NO_CLARIFICATION on the field ``clarificationId`` and leaves the question pending; the
    answer to its own id starts the answer's turn."""
    sid, question_id = await asked(engine, agent)
    with pytest.raises(UserFacingError) as info:
        await engine.answer_clarification(PRINCIPAL, sid, "red", new_id())
    error = info.value
    assert (error.code, error.message, error.field) == (
        ErrorCode.NO_CLARIFICATION,
        "no such clarification is pending",
        ["clarificationId"],
    )
    assert (await clarification(engine, sid)) is not None and agent.no_new_run()
    await engine.answer_clarification(PRINCIPAL, sid, "red", question_id)
    assert (await agent.next_run()).prompt == "red"
    assert await clarification(engine, sid) is None


async def test_q9_an_answer_while_a_runtime_hold_is_on_is_session_busy_and_keeps_the_question(
    engine: Engine, agent: ManualAgent
) -> None:
    """Q9: a clarification's answer is a targeted start, which obeys holds: during a step
    change (WORKFLOW_TRANSITION) it is refused with SESSION_BUSY and the question stays
    pending (the refusal rolls back its withdrawal); once the hold is gone it is taken."""
    sid, question_id = await asked(engine, agent)
    async with engine.core.hold(sid):
        with pytest.raises(UserFacingError) as info:
            await engine.answer_clarification(PRINCIPAL, sid, "red", question_id)
    assert (info.value.code, info.value.message) == (
        ErrorCode.SESSION_BUSY,
        "the session cannot take the answer now",
    )
    pending = await clarification(engine, sid)
    assert pending is not None and pending.id == question_id and agent.no_new_run()
    await engine.answer_clarification(PRINCIPAL, sid, "red", question_id)
    assert (await agent.next_run()).prompt == "red"


async def test_c9_c8_a_cancel_while_a_decided_end_waits_to_commit_is_nothing_running(
    engine: Engine, agent: ManualAgent, monkeypatch: pytest.MonkeyPatch
) -> None:
    """C8/C9: a turn's end is decided once (pending or not) and then retried until it commits
    (Q10). A cancel that arrives between two attempts finds the turn already ending: there is
    nothing left to stop (NOTHING_RUNNING, no reference, no park), the end commits as decided
    (COMPLETED) and the queue runs on."""
    sid, first = await busy_session(engine, agent)
    await enqueue(engine, sid, "second")
    end_turn = SqlTx.end_turn
    failed = asyncio.Event()
    away = True

    async def flaky(self: SqlTx, *args: Any, **kwargs: Any) -> Any:
        if away:
            failed.set()
            raise StoreError("the database is away")
        return await end_turn(self, *args, **kwargs)

    monkeypatch.setattr(SqlTx, "end_turn", flaky)
    first.complete()
    await within(failed.wait(), WAIT)
    async with asyncio.timeout(WAIT):
        result = await engine.cancel(PRINCIPAL, sid)
    assert result.outcome is CancelOutcome.NOTHING_RUNNING
    assert first.signals == [] and not (await engine.cancellation(sid)).pending
    away = False
    second = await agent.next_run()
    assert second.prompt == "second"
    turns = await engine.turns_of(sid, 10)
    assert [(t.prompt, t.status) for t in turns] == [
        ("first", TurnStatus.COMPLETED),
        ("second", TurnStatus.RUNNING),
    ]
    status = await engine.queue_status(sid)
    assert (status.auto_run, status.pause_reason) == (True, None)


async def test_q9_send_message_refusals_say_what_holds_the_session(
    engine: Engine, agent: ManualAgent
) -> None:
    """Q9 (sendMessage): a pending clarification is CLARIFICATION_PENDING (answer it instead);
    a session that is neither busy nor promptable is SESSION_NOT_PROMPTABLE naming its state.
    Neither queues anything."""
    sid, run = await busy_session(engine, agent)
    run.complete(clarification="which one?")
    await settle(engine, sid)
    assert await refusal(engine.send_message(PRINCIPAL, sid, "hello")) == (
        ErrorCode.CLARIFICATION_PENDING,
        "the agent asked a question: answer it with answerClarification",
        None,
    )
    await engine.cancel(PRINCIPAL, sid)  # withdraws the clarification (C9)
    async with engine.core.store.transaction() as tx:
        await tx.lock(sid)
        await tx.set_session_state(sid, SessionState.FAILED)
    assert await refusal(engine.send_message(PRINCIPAL, sid, "hello")) == (
        ErrorCode.SESSION_NOT_PROMPTABLE,
        "session is FAILED; it cannot take prompts",
        None,
    )
    assert (await engine.queue_status(sid)).entries == () and agent.no_new_run()


async def test_q9_q11_a_prompt_to_a_held_session_is_queued_as_the_users_within_capacity(
    engine: Engine, agent: ManualAgent
) -> None:
    """Q9: a promptable session under a runtime hold (a step change) does not start a turn
    for a prompt: it queues it, as the user's (Q12: editable); Q11: a busy session's queue
    is refused past its capacity."""
    _, session = await new_session(engine)
    sid = session.id
    async with engine.core.hold(sid):
        admission = await engine.send_message(PRINCIPAL, sid, "while moving")
    assert admission.turn is None and admission.entry is not None
    assert (admission.entry.content, admission.entry.source) == (
        "while moving",
        MessageSource.USER,
    )
    status = await engine.queue_status(sid)
    assert [(e.id, e.source) for e in status.entries] == [(admission.entry.id, MessageSource.USER)]
    assert agent.no_new_run()
    busy_sid, _ = await busy_session(engine, agent)
    limit = engine.core.settings.queue_limit
    assert limit is not None
    await enqueue(engine, busy_sid, *[f"q{i}" for i in range(limit)])
    code, message, _ = await refusal(engine.send_message(PRINCIPAL, busy_sid, "one more"))
    assert (code, message) == (
        ErrorCode.QUEUE_FULL,
        f"the queue is full: it holds {limit} of at most {limit} entries",
    )
    assert len((await engine.queue_status(busy_sid)).entries) == limit


@pytest.fixture
async def flow(tmp_path: Path, engine_settings: Settings, open_engine: Any) -> Engine:
    """An engine whose first step moves on completion into a step with a new session."""
    path = tmp_path / "workflow.toml"
    path.write_text(WORKFLOW)
    engine: Engine = await open_engine(engine_settings.model_copy(update={"workflow_file": path}))
    return engine


async def test_w1_q9_a_prompt_between_a_completion_and_its_step_change_waits_for_the_move(
    flow: Engine, agent: ManualAgent
) -> None:
    """W1/Q9: a completion that moves the task on holds its queue (WORKFLOW_TRANSITION) from
    the end's commit until the step change has committed. A prompt that arrives in between
    (another client's enqueueMessage) is queued, not started on the step being left; the
    move's one drain then runs it on the task's new session."""
    task, session = await new_session(flow)
    await flow.send_message(PRINCIPAL, session.id, "plan it")
    run = await agent.next_run()
    on_completed = flow.turns.on_completed
    assert on_completed is not None
    seen: dict[str, Any] = {}

    async def prompt_first(session_id: str) -> None:
        _, seen["turn"], _ = await flow.enqueue(PRINCIPAL, session_id, "late", None)
        seen["status"] = await flow.queue_status(session_id)
        await on_completed(session_id)

    flow.turns.on_completed = prompt_first
    run.complete()
    successor = await agent.next_run()
    assert seen["turn"] is None
    assert "WORKFLOW_TRANSITION" in seen["status"].held_by
    assert [e.content for e in seen["status"].entries] == ["late"]
    moved = await flow.task(PRINCIPAL, task.id)
    assert moved is not None and moved.workflow_step == "BUILD"
    assert (successor.prompt, successor.session_id) == ("late", moved.current_session_id)
    assert [t.prompt for t in await flow.turns_of(session.id, 10)] == ["plan it"]


async def test_q9_a_clarification_records_the_turn_that_asked_it(
    engine: Engine, agent: ManualAgent
) -> None:
    """SPEC §1 (Clarification), Q9: the question a turn's end raises is stored with the turn
    that asked it, which ended COMPLETED."""
    sid, run = await busy_session(engine, agent)
    run.complete(clarification="which one?")
    await settle(engine, sid)
    question = await clarification(engine, sid)
    assert question is not None
    assert (question.turn_id, question.question) == (run.turn_id, "which one?")
    turn = await engine.current_turn(sid)
    assert turn is not None and (turn.id, turn.status) == (run.turn_id, TurnStatus.COMPLETED)


async def test_q10_m6_an_end_that_cannot_commit_at_shutdown_is_given_up_then_recovered(
    engine: Engine, open_engine: Any, agent: ManualAgent, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Q10/M6: a turn's end is retried until it commits, except at shutdown: then it is given
    up (the runner is forgotten, reported FAILED, and moves nothing) and the turn stays
    RUNNING in the database, so that the next start's recovery ends it and drains the
    queue — nothing is lost."""
    sid, first = await busy_session(engine, agent)
    await enqueue(engine, sid, "second")
    failed = asyncio.Event()

    async def away(self: SqlTx, *args: Any, **kwargs: Any) -> Any:
        failed.set()
        raise StoreError("the database is away")

    monkeypatch.setattr(SqlTx, "end_turn", away)
    runner = engine.core.runners[sid]
    first.complete()
    await within(failed.wait(), WAIT)
    engine.core.closing = True  # the shutdown begins while the end cannot commit
    await within(runner.finished.wait(), WAIT)
    assert runner.final_status is TurnStatus.FAILED and sid not in engine.core.runners
    monkeypatch.undo()
    assert (await engine.turns_of(sid, 5))[-1].status is TurnStatus.RUNNING
    await crash(engine)  # the process is gone (on PostgreSQL: its instance row too)
    second = ManualAgent()
    restarted = await open_engine(agent_=second)
    ended = (await restarted.turns_of(sid, 5))[0]
    assert (ended.prompt, ended.status, ended.error) == ("first", TurnStatus.FAILED, "interrupted")
    assert (await second.next_run()).prompt == "second"


async def test_c5_q10_a_cancel_while_the_turns_end_cannot_commit_drops_no_end(
    flow: Engine, agent: ManualAgent, monkeypatch: pytest.MonkeyPatch
) -> None:
    """C5/Q10 (issue 12): the agent stops on the cancel's INTERRUPT but its end cannot commit
    (the database is away) for longer than the stop ladder. The ladder then gives up on the
    agent (TIMED_OUT), which must not drop the end being retried: once the database is back
    the end commits (CANCELLED: the cancel was pending when it was decided, C8), the
    session is free, and — W2 — a cancel whose turn had not ended when it gave up moves no
    step, even where the step's cancel completes it."""
    task, session = await new_session(flow)
    sid = session.id
    await flow.send_message(PRINCIPAL, sid, "first")
    await agent.next_run()
    await enqueue(flow, sid, "second")
    end_turn = SqlTx.end_turn
    away = True

    async def flaky(self: SqlTx, *args: Any, **kwargs: Any) -> Any:
        if away:
            raise StoreError("the database is away")
        return await end_turn(self, *args, **kwargs)

    monkeypatch.setattr(SqlTx, "end_turn", flaky)
    runner = flow.core.runners[sid]
    result = await flow.cancel(PRINCIPAL, sid)
    assert result.outcome is CancelOutcome.TIMED_OUT and runner.final_status is None
    assert not (await flow.cancellation(sid)).pending  # C5: the reference is released
    moved = await flow.task(PRINCIPAL, task.id)
    assert moved is not None and moved.workflow_step == task.workflow_step
    away = False
    await within(runner.finished.wait(), WAIT)
    assert runner.final_status is TurnStatus.CANCELLED and sid not in flow.core.runners
    turns = await flow.turns_of(sid, 5)
    assert [(t.prompt, t.status) for t in turns] == [("first", TurnStatus.CANCELLED)]
    status = await flow.queue_status(sid)  # Q7: the backlog was parked by the cancel
    assert (status.auto_run, status.pause_reason) == (False, PauseReason.CANCEL)
    assert [e.content for e in status.entries] == ["second"]


async def test_c8_q7_a_turn_ending_while_a_cancel_is_accepted_ends_cancelled_and_starts_nothing(
    engine: Engine, agent: ManualAgent
) -> None:
    """C8/Q7: a cancel decides that a turn is running (and not ending) and records its
    acceptance under the session lock, the lock under which a turn's end is decided. A turn
    whose agent completes while the acceptance is being written therefore cannot slip in:
    its end sees the cancel pending, ends CANCELLED and starts nothing; the backlog is
    parked."""
    sid, first = await busy_session(engine, agent)
    await enqueue(engine, sid, "second")
    runner = engine.core.runners[sid]

    async def completing_meanwhile(session_id: str, turn_id: str | None) -> None:
        if turn_id is None:
            return  # the park clearing the mark, later
        first.complete()  # the agent ends now; its end waits for the session lock
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(0.5):  # every chance for the end to slip in
                while not runner.ending:  # noqa: ASYNC110
                    await asyncio.sleep(0.01)

    with faults_of(engine).before("set_cancel_mark", completing_meanwhile):  # the acceptance
        await engine.cancel(PRINCIPAL, sid)
    await settle(engine, sid)
    turns = await engine.turns_of(sid, 5)
    assert [(t.prompt, t.status) for t in turns] == [("first", TurnStatus.CANCELLED)]
    assert agent.no_new_run()
    status = await engine.queue_status(sid)
    assert (status.auto_run, status.pause_reason) == (False, PauseReason.CANCEL)
    assert [e.content for e in status.entries] == ["second"]


async def test_c4_c5_the_whole_stop_is_bounded_even_when_a_signal_never_returns(
    engine_settings: Settings, open_engine: Any, agent: ManualAgent
) -> None:
    """C4/C5: the stop ladder is bounded as a whole (``cancel_operation_timeout``), not only
    rung by rung: an agent whose signal call never returns is abandoned when the bound runs
    out, the cancel answers TIMED_OUT and the pending flag clears."""
    bounded = await open_engine(engine_settings.model_copy(update={"cancel_operation_timeout": 1}))
    sid, run = await busy_session(bounded, agent)
    stuck = asyncio.Event()

    async def never_returns(signal: Any) -> None:
        await stuck.wait()

    run.before_signal = never_returns
    async with asyncio.timeout(WAIT):
        result = await bounded.cancel(PRINCIPAL, sid)
    assert result.outcome is CancelOutcome.TIMED_OUT
    assert run.signals[0] is Signal.INTERRUPT and Signal.TERMINATE not in run.signals
    assert (await bounded.cancellation(sid)).pending is False
    stuck.set()


async def test_q6_q10_a_drain_when_the_shutdown_begins_after_its_policy_starts_nothing(
    engine: Engine, agent: ManualAgent
) -> None:
    """Q6/Q10: ``drain`` commits auto-run ON, then starts the head in a second unit of work.
    When the instance begins shutting down between the two, the start is held: no turn, no
    transaction, the entry still queued, and the drain answers the policy's commit."""
    _, session = await new_session(engine)
    sid = session.id
    await engine.set_auto_run(PRINCIPAL, sid, False, None)
    (head,) = await enqueue(engine, sid, "waits")

    async def shutdown() -> None:  # after the drain's policy commit, before its start
        await engine.aclose()

    with faults_of(engine).after_commit("set_policy_bumped", shutdown):
        turn, answered = await engine.drain(PRINCIPAL, sid, None)
    assert turn is None and agent.runs == []
    assert answered.auto_run and [e.id for e in answered.entries] == [head]
    assert answered == await engine.queue_status(sid)


async def test_a11_a_turns_end_and_a_failures_reason_are_in_the_server_log(
    engine: Engine, agent: ManualAgent, caplog: pytest.LogCaptureFixture
) -> None:
    """A11 (the server's side): every turn's end is logged with its turn and status, and a
    failure with its reason, the agent's own words."""
    sid, run = await busy_session(engine, agent)
    failed = run.turn_id
    await enqueue(engine, sid, "next")
    with caplog.at_level("INFO", logger="turnqueue.engine.turns"):
        run.fail("the provider is unreachable")
        nxt = await agent.next_run()
        nxt.complete()
        await settle(engine, sid)
    ends = [r.getMessage() for r in caplog.records if r.name == "turnqueue.engine.turns"]
    assert ends == [
        f"turn {failed} ended FAILED: the provider is unreachable",
        f"turn {nxt.turn_id} ended COMPLETED",
    ]


async def test_a11_a_failed_turn_keeps_its_classification_and_the_agents_stderr_apart(
    engine: Engine, agent: ManualAgent
) -> None:
    """A11: a turn the agent failed ends FAILED with the agent's reason, its classification,
    and what the agent wrote to stderr, kept apart from the reason."""
    sid, run = await busy_session(engine, agent)
    run.finish(
        AgentResult(
            ok=False,
            error="429: slow down",
            error_kind=AgentErrorKind.RATE_LIMIT,
            stderr="warning: quota\n",
        )
    )
    await settle(engine, sid)
    turn = await engine.current_turn(sid)
    assert turn is not None
    assert (turn.status, turn.error, turn.error_kind, turn.agent_stderr) == (
        TurnStatus.FAILED,
        "429: slow down",
        AgentErrorKind.RATE_LIMIT,
        "warning: quota\n",
    )


async def test_o2_the_live_end_of_a_turns_output_names_its_session_and_turn(
    engine: Engine, agent: ManualAgent
) -> None:
    """O2: the live ``done`` chunk a turn's end publishes names the session and the turn it
    ends (a client following one turn tells it from the next), after the turn's last text."""
    sid, run = await busy_session(engine, agent)
    with engine.bus.subscribe(sid, [EventKind.OUTPUT]) as sub:
        run.complete()
        while not (event := await within(sub.get(), WAIT)).chunk or not event.chunk.done:
            pass
    turn = await engine.current_turn(sid)
    assert turn is not None and turn.id == run.turn_id
    assert event.chunk == OutputChunk(
        sid, run.turn_id, len(turn.output), "", True, TurnStatus.COMPLETED
    )


async def test_q10_an_end_that_cannot_commit_is_logged_with_its_turn_and_retried(
    engine: Engine, agent: ManualAgent, caplog: pytest.LogCaptureFixture
) -> None:
    """Q10/M6: each attempt at a turn's end that cannot commit is in the server log with the
    turn's id (what an operator looks for while the database is away), and the end is
    retried until it commits."""
    sid, run = await busy_session(engine, agent)
    with (
        faults_of(engine).failing("end_turn", times=2) as left,
        caplog.at_level("ERROR", logger="turnqueue.engine.turns"),
    ):
        run.complete()
        await settle(engine, sid)
        assert left() == 0
    logged = [r.getMessage() for r in caplog.records if r.name == "turnqueue.engine.turns"]
    assert logged == [f"could not record the end of turn {run.turn_id}"] * 2
    turn = await engine.current_turn(sid)
    assert turn is not None and turn.status is TurnStatus.COMPLETED
