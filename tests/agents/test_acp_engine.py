"""The ``acp`` profile behind the engine, in process (SPEC A2, A3, A6): session start, items
and an approval answered through the engine's API."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from turnqueue.agents import Agent, ScriptedAgent
from turnqueue.agents.acp import AcpAgent
from turnqueue.agents.profiles import Profile
from turnqueue.bus import EventBus
from turnqueue.domain import AgentType, ApprovalOutcome, HoldReason, ItemKind, SessionState
from turnqueue.engine.orchestrator import Engine
from turnqueue.errors import Conflict, ErrorCode, StoreError
from turnqueue.settings import Settings
from turnqueue.store.sql import open_store

FAKE = Path(__file__).with_name("fake_acp_agent.py")
ME = "local"


WORKFLOW = """
[[steps]]
name = "PLAN"

[[steps]]
name = "BUILD"
new_session_on_enter = true
"""


@pytest.fixture
async def engine(database_url: str, tmp_path: Path) -> AsyncIterator[Engine]:
    workflow = tmp_path / "workflow.toml"
    workflow.write_text(WORKFLOW, encoding="utf-8")
    settings = Settings(
        database_url=database_url,
        cancel_timeout=1.0,
        escalation_timeout=1.0,
        workflow_file=workflow,
    )
    store = await open_store(settings)
    profile = Profile(
        name="fake",
        type=AgentType.ACP,
        command=(sys.executable, str(FAKE)),
        workspace=tmp_path / "work",
        start_timeout=30,
    )
    agents: dict[str, Agent] = {"fake": AcpAgent(profile), "scripted": ScriptedAgent(0.05)}
    opened = await Engine.open(settings, store, EventBus(64), agents=agents)
    try:
        yield opened
    finally:
        await opened.aclose()
        await store.close()


async def until(check, what: str, timeout: float = 60):  # type: ignore[no-untyped-def]
    deadline = asyncio.get_running_loop().time() + timeout
    while not (value := await check()):
        assert asyncio.get_running_loop().time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)
    return value


async def ready(engine: Engine) -> str:
    _, session = await engine.create_task(ME, "t", "fake")
    assert session.state is SessionState.STARTING

    async def started() -> bool:
        found = await engine.session(ME, session.id)
        return found is not None and found.state is SessionState.WAITING_FOR_INPUT

    await until(started, "the agent to start")
    return session.id


async def finished(engine: Engine, session_id: str, turn_id: str):  # type: ignore[no-untyped-def]
    async def check():  # type: ignore[no-untyped-def]
        turns = await engine.turns_of(session_id, 10)
        turn = next((t for t in turns if t.id == turn_id), None)
        return turn if turn is not None and turn.ended_at is not None else None

    return await until(check, "the turn to end")


async def asked(engine: Engine, session_id: str):  # type: ignore[no-untyped-def]
    """The approval the session's agent asks for, once it is pending."""

    async def pending():  # type: ignore[no-untyped-def]
        return await engine.pending_approval(session_id)

    return await until(pending, "the approval")


async def test_a2_a3_session_start_and_items_through_the_engine(engine: Engine) -> None:
    session_id = await ready(engine)
    admission = await engine.send_message(ME, session_id, "/tool")
    assert admission.turn is not None
    turn = await finished(engine, session_id, admission.turn.id)
    assert turn.output == "read it"
    kinds = [i.kind for i in await engine.turn_items(turn.id)]
    assert kinds == [ItemKind.TOOL_CALL, ItemKind.MESSAGE]
    assert [p.type for p in engine.agents()] == [AgentType.ACP, AgentType.SCRIPTED]


async def test_a6_approval_through_the_engine_once(engine: Engine) -> None:
    session_id = await ready(engine)
    admission = await engine.send_message(ME, session_id, "/permission")
    assert admission.turn is not None

    approval = await asked(engine, session_id)
    status = await engine.queue_status(session_id)
    assert HoldReason.APPROVAL in status.held_by
    results = await asyncio.gather(
        engine.answer_approval(ME, approval.id, "reject"),
        engine.answer_approval(ME, approval.id, "allow"),
        return_exceptions=True,
    )
    errors = [r for r in results if isinstance(r, Exception)]
    assert len(errors) == 1
    assert isinstance(errors[0], Conflict) and errors[0].code is ErrorCode.APPROVAL_RESOLVED
    answered, _ = next(r for r in results if not isinstance(r, BaseException))
    turn = await finished(engine, session_id, admission.turn.id)
    assert turn.output == f"permission: {answered.option_id}"
    (kept,) = await engine.approvals_of_turn(turn.id)
    assert kept.outcome is ApprovalOutcome.SELECTED and kept.answered_by == ME
    status = await engine.queue_status(session_id)
    assert HoldReason.APPROVAL not in status.held_by


async def test_a6_an_answer_that_cannot_commit_answers_nothing_and_a_retry_does(
    engine: Engine,
) -> None:
    """A6/Q9: an answer whose transaction fails (the database away) answers nothing: the
    approval stays pending, the queue stays held by it, the agent still waits, and a retry
    answers it exactly once. Before, the failed answer had already forgotten the waiting agent,
    so every retry was refused SESSION_BUSY and the turn waited for good."""
    session_id = await ready(engine)
    admission = await engine.send_message(ME, session_id, "/permission")
    assert admission.turn is not None

    approval = await asked(engine, session_id)
    changed = engine.approvals._changed

    async def database_away(c: object) -> None:  # inside the answer's unit of work
        raise StoreError("the database is away")

    engine.approvals._changed = database_away  # type: ignore[method-assign]
    with pytest.raises(StoreError):
        await engine.answer_approval(ME, approval.id, "allow")
    engine.approvals._changed = changed  # type: ignore[method-assign]
    still = await engine.pending_approval(session_id)
    assert still is not None and still.id == approval.id
    assert still.outcome is ApprovalOutcome.PENDING
    assert HoldReason.APPROVAL in (await engine.queue_status(session_id)).held_by
    answered, _ = await engine.answer_approval(ME, approval.id, "allow")
    assert answered.option_id == "allow"
    turn = await finished(engine, session_id, admission.turn.id)
    assert turn.output == "permission: allow"
    (kept,) = await engine.approvals_of_turn(turn.id)
    assert (kept.outcome, kept.option_id) == (ApprovalOutcome.SELECTED, "allow")
    assert HoldReason.APPROVAL not in (await engine.queue_status(session_id)).held_by


async def test_a5_a6_an_approval_given_up_while_its_answer_fails_is_stored_cancelled(
    engine: Engine,
) -> None:
    """A5/A6/Q9: the agent gives up waiting (its wait is cancelled, as a cancel does) while an
    answer's transaction fails: nothing was answered, and the agent's own exit finds no entry
    to release, so the failed answer stores the approval CANCELLED (once) and the hold ends.
    Before, the approval stayed pending in the database for good."""
    session_id = await ready(engine)
    admission = await engine.send_message(ME, session_id, "/permission")
    assert admission.turn is not None

    approval = await asked(engine, session_id)
    waiting = engine.approvals._waiting[approval.id]

    async def given_up_and_database_away(c: object) -> None:
        waiting.future.cancel()  # the agent stops waiting (A5), as a cancel's INTERRUPT does
        raise StoreError("the database is away")

    engine.approvals._changed = given_up_and_database_away  # type: ignore[method-assign]
    with pytest.raises(StoreError):
        await engine.answer_approval(ME, approval.id, "allow")
    del engine.approvals._changed  # the class's own again

    async def stored_cancelled():  # type: ignore[no-untyped-def]
        (kept,) = await engine.approvals_of_turn(admission.turn.id)
        return kept if kept.outcome is ApprovalOutcome.CANCELLED else None

    kept = await until(stored_cancelled, "the approval stored cancelled")
    assert kept.option_id is None and kept.answered_by is None
    assert await engine.pending_approval(session_id) is None
    await finished(engine, session_id, admission.turn.id)
    assert HoldReason.APPROVAL not in (await engine.queue_status(session_id)).held_by
    assert approval.id not in engine.approvals._waiting


async def test_a2_a_transferred_session_stops_its_agent_and_the_new_one_starts_its_own(
    engine: Engine,
) -> None:
    """A2 with W3: the session a transfer completes stops its agent; the new session's first
    prompt starts one in the same task directory."""
    session_id = await ready(engine)
    agent = engine.core.agents["fake"]
    assert isinstance(agent, AcpAgent)
    pid = agent.process_of(session_id)
    assert pid is not None
    found = await engine.session(ME, session_id)
    assert found is not None
    task, moved = await engine.move_task(ME, found.task_id, "BUILD")
    assert moved.id != session_id

    async def stopped() -> bool:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return agent.process_of(session_id) is None
        return False

    await until(stopped, "the old session's agent to stop")
    admission = await engine.send_message(ME, moved.id, "/whoami")
    assert admission.turn is not None
    turn = await finished(engine, moved.id, admission.turn.id)
    assert f"pid={pid} " not in turn.output and turn.output.endswith(f"/work/{task.id}")
