"""Starting and ending turns (``engine/turns.py``): the lines its mutation run (issue 12) found
unguarded. Each test names the rule it proves; ``tests/MUTANTS.md`` lists the mutants each kills.
"""

from __future__ import annotations

from typing import Any

import pytest
from engine_helpers import PRINCIPAL, ManualAgent, new_session, settle
from test_queue_rules import busy_session, enqueue

from turnqueue.domain import PauseReason, new_id
from turnqueue.engine.orchestrator import Engine
from turnqueue.errors import ErrorCode, UserFacingError


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
    reserve = engine.turns._reserve

    async def off_first(session_id: str, **kwargs: Any) -> Any:
        await engine.set_auto_run(PRINCIPAL, session_id, False, None)  # commits first
        return await reserve(session_id, **kwargs)

    engine.turns._reserve = off_first  # type: ignore[method-assign]
    turn = await engine.drain(PRINCIPAL, sid, None)
    assert turn is not None and turn.prompt == "a"
    assert (await agent.next_run()).prompt == "a"
    status = await engine.queue_status(sid)
    assert (status.auto_run, status.pause_reason) == (False, PauseReason.USER)
    assert [e.content for e in status.entries] == ["b"]


async def asked(engine: Engine, agent: ManualAgent) -> tuple[str, str]:
    """A session whose turn ended with a question (the clarification pending): (sid, its id)."""
    sid, run = await busy_session(engine, agent)
    run.complete(clarification="which one?")
    await settle(engine, sid)
    question = await engine.clarification(sid)
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
    assert (await engine.clarification(sid)) is not None and agent.no_new_run()
    await engine.answer_clarification(PRINCIPAL, sid, "red", question_id)
    assert (await agent.next_run()).prompt == "red"
    assert await engine.clarification(sid) is None


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
    pending = await engine.clarification(sid)
    assert pending is not None and pending.id == question_id and agent.no_new_run()
    await engine.answer_clarification(PRINCIPAL, sid, "red", question_id)
    assert (await agent.next_run()).prompt == "red"
