"""The ``acp`` profile behind the engine, in process (SPEC A2, A3, A6): session start, items
and an approval answered through the engine's API."""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from engine_probes import pending_approval
from engine_waits import ME, finished, started, until
from faults import FaultyStore, faults_of

from turnqueue.agents import Agent, ScriptedAgent
from turnqueue.agents.acp import AcpAgent
from turnqueue.agents.profiles import Profile
from turnqueue.bus import EventBus
from turnqueue.domain import (
    AgentErrorKind,
    AgentType,
    Approval,
    ApprovalOutcome,
    AuthState,
    CancelOutcome,
    HoldReason,
    ItemKind,
    SessionState,
    TurnStatus,
)
from turnqueue.engine import Engine
from turnqueue.errors import Conflict, ErrorCode, StoreError
from turnqueue.settings import Settings
from turnqueue.store.sql import open_store

FAKE = Path(__file__).with_name("fake_acp_agent.py")


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
    keyed = replace(profile, name="keyed", env={"FAKE_ACP_AUTH": "1", "FAKE_API_KEY": "k"})
    keyless = replace(profile, name="keyless", env={"FAKE_ACP_AUTH": "1"})
    agents: dict[str, Agent] = {
        "fake": AcpAgent(profile),
        "keyed": AcpAgent(keyed),
        "keyless": AcpAgent(keyless),
        "scripted": ScriptedAgent(0.05),
    }
    seam: Any = FaultyStore(store)  # a Store, by delegation
    opened = await Engine.open(settings, seam, EventBus(64), agents=agents)
    try:
        yield opened
    finally:
        await opened.aclose()
        await store.close()


async def ready(engine: Engine, agent: str = "fake") -> str:
    return (await started(engine, agent))[1]


async def asked(engine: Engine, session_id: str) -> Approval:
    """The approval the session's agent asks for, once it is pending."""

    async def pending() -> Approval | None:
        return await pending_approval(engine, session_id)

    return await until(pending, "the approval")


async def test_a2_a3_session_start_and_items_through_the_engine(engine: Engine) -> None:
    session_id = await ready(engine)
    admission = await engine.send_message(ME, session_id, "/tool")
    assert admission.turn is not None
    turn = await finished(engine, session_id, admission.turn.id)
    assert turn.output == "read it"
    kinds = [i.kind for i in await engine.turn_items(turn.id)]
    assert kinds == [ItemKind.TOOL_CALL, ItemKind.MESSAGE]
    assert [p.type for p in engine.agents()] == [AgentType.ACP] * 3 + [AgentType.SCRIPTED]


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
    with faults_of(engine).failing("answer_approval"), pytest.raises(StoreError):
        await engine.answer_approval(ME, approval.id, "allow")
    still = await pending_approval(engine, session_id)
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

    failed = False

    async def given_up_and_database_away(*args: Any, **kwargs: Any) -> None:
        nonlocal failed
        if not failed:  # the answer's; the release's CANCELLED (after the block) goes through
            failed = True
            waiting.future.cancel()  # the agent stops waiting (A5), as a cancel's INTERRUPT does
            raise StoreError("the database is away")

    with faults_of(engine).before("answer_approval", given_up_and_database_away):
        with pytest.raises(StoreError):
            await engine.answer_approval(ME, approval.id, "allow")

    async def stored_cancelled():  # type: ignore[no-untyped-def]
        (kept,) = await engine.approvals_of_turn(admission.turn.id)
        return kept if kept.outcome is ApprovalOutcome.CANCELLED else None

    kept = await until(stored_cancelled, "the approval stored cancelled")
    assert kept.option_id is None and kept.answered_by is None
    assert await pending_approval(engine, session_id) is None
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


async def test_a11_an_error_answer_fails_the_turn_keeps_the_agent_and_is_stored_and_logged(
    engine: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    """A11 through the engine, on both stores: the turn is FAILED with the agent's own code and
    message, its classification and its stderr stored apart (durable with the turn), the reason
    in the log; the agent process that answered the error takes the next prompt."""
    session_id = await ready(engine)
    agent = engine.core.agents["fake"]
    assert isinstance(agent, AcpAgent)
    pid = agent.process_of(session_id)
    caplog.set_level(logging.INFO, logger="turnqueue.engine.turns")
    admission = await engine.send_message(ME, session_id, "/error-auth")
    assert admission.turn is not None
    turn = await finished(engine, session_id, admission.turn.id)
    assert turn.status is TurnStatus.FAILED
    assert turn.error.startswith("agent error -32000 (authentication): Authentication required")
    assert turn.error_kind is AgentErrorKind.AUTHENTICATION
    assert "Error handling request" in turn.agent_stderr
    assert "Error handling request" not in turn.error
    assert f"ended FAILED: {turn.error}" in caplog.text
    stored = next(t for t in await engine.turns_of(session_id, 10) if t.id == turn.id)
    assert (stored.error_kind, stored.agent_stderr) == (turn.error_kind, turn.agent_stderr)
    admission = await engine.send_message(ME, session_id, "/whoami")
    assert admission.turn is not None
    after = await finished(engine, session_id, admission.turn.id)
    assert after.status is TurnStatus.COMPLETED and f"pid={pid} " in after.output
    assert after.error_kind is None and after.agent_stderr is None


async def test_a11_authenticate_before_session_new_and_a_refusal_that_names_the_methods(
    engine: Engine,
) -> None:
    """A11: the profile whose env sets the method's variable is authenticated and starts; the
    one without fails its session with the agent's refusal and methods (stderr apart), and
    `agents` shows each profile's auth state."""
    states = {p.name: p.auth for p in engine.agents()}
    assert states["keyed"] is not None and states["keyed"].state is AuthState.UNKNOWN
    assert states["scripted"] is None
    keyed = await ready(engine, "keyed")
    admission = await engine.send_message(ME, keyed, "/whoami")
    assert admission.turn is not None
    turn = await finished(engine, keyed, admission.turn.id)
    assert " auth=fake-api-key " in turn.output

    _, session = await engine.create_task(ME, "t", "keyless")

    async def failed() -> bool:
        found = await engine.session(ME, session.id)
        return found is not None and found.state is SessionState.FAILED

    await until(failed, "the keyless session to fail")
    reason = engine.agent_error(session.id)
    assert reason is not None
    assert reason.startswith(
        "agent refused session/new: agent error -32000 (authentication): Authentication required"
    )
    assert "fake-api-key (Use FAKE_API_KEY" in reason and "WARNING" not in reason
    assert "WARNING: proceeding" in (engine.agent_stderr(session.id) or "")
    auth = {p.name: p.auth for p in engine.agents()}
    assert auth["keyed"] is not None and auth["keyed"].state is AuthState.AUTHENTICATED
    assert auth["keyed"].method == "fake-api-key"
    assert auth["keyless"] is not None and auth["keyless"].state is AuthState.REFUSED
    assert auth["keyless"].message == "Authentication required"
    assert [m.id for m in auth["keyless"].methods] == ["fake-login", "fake-api-key"]


async def test_a5_a11_cancel_ends_a_turn_whose_agent_never_answers(engine: Engine) -> None:
    """A5/A11: an agent alive but silent and deaf to session/cancel: the cancel ladder still
    ends the turn (CANCELLED), and the next prompt runs on a fresh process."""
    session_id = await ready(engine)
    admission = await engine.send_message(ME, session_id, "/hang")
    assert admission.turn is not None

    async def thinking() -> bool:
        return bool(await engine.turn_items(admission.turn.id))  # type: ignore[union-attr]

    await until(thinking, "the hanging prompt to reach the agent")
    outcome = await engine.cancel(ME, session_id)
    assert outcome.outcome is CancelOutcome.ESCALATED
    turn = await finished(engine, session_id, admission.turn.id)
    assert turn.status is TurnStatus.CANCELLED
    assert turn.agent_stderr == "fake agent: waiting for the model provider"
    admission = await engine.send_message(ME, session_id, "after")
    assert admission.turn is not None
    after = await finished(engine, session_id, admission.turn.id)
    assert after.output == "echo: after"
