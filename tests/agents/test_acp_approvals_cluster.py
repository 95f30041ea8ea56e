"""A6 on any instance (M4), in process: two engines on one PostgreSQL, the turn and its agent on
A, its approval answered on B (forwarded to A) and raced from both, resolved exactly once."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from engine_probes import pending_approval
from test_acp_engine import FAKE, ME, finished, until

from turnqueue.agents import Agent
from turnqueue.agents.acp import AcpAgent
from turnqueue.agents.profiles import Profile
from turnqueue.bus import EventBus
from turnqueue.domain import AgentType, Approval, ApprovalOutcome, SessionState
from turnqueue.engine import Engine
from turnqueue.errors import Conflict, ErrorCode
from turnqueue.settings import Settings
from turnqueue.store.sql import SqlStore, open_store


@pytest.fixture
async def pair(pg_database_url: str, tmp_path: Path) -> AsyncIterator[tuple[Engine, Engine]]:
    settings = Settings(
        database_url=pg_database_url,
        cancel_timeout=1.0,
        escalation_timeout=1.0,
        lease_seconds=2.0,
    )
    opened: list[tuple[Engine, SqlStore]] = []
    for _ in range(2):
        profile = Profile(
            name="fake",
            type=AgentType.ACP,
            command=(sys.executable, str(FAKE)),
            workspace=tmp_path / "work",
            start_timeout=30,
        )
        store = await open_store(settings)
        agents: dict[str, Agent] = {"fake": AcpAgent(profile)}
        opened.append((await Engine.open(settings, store, EventBus(64), agents=agents), store))
    try:
        yield opened[0][0], opened[1][0]
    finally:
        for engine, store in reversed(opened):
            await engine.aclose()
            await store.close()


async def _asked(a: Engine, b: Engine, session_id: str, prompt: str) -> tuple[str, Approval]:
    admission = await a.send_message(ME, session_id, prompt)
    assert admission.turn is not None

    async def pending() -> Approval | None:
        return await pending_approval(b, session_id)  # B reads it from the store

    return admission.turn.id, await until(pending, "the approval, seen from B")


async def test_a6_m4_an_approval_is_answered_on_any_instance_exactly_once(
    pair: tuple[Engine, Engine],
) -> None:
    a, b = pair
    _, session = await a.create_task(ME, "t", "fake")

    async def started() -> bool:
        found = await a.session(ME, session.id)
        return found.state is SessionState.WAITING_FOR_INPUT

    await until(started, "the agent to start on A")
    # 1. Answered on B alone: forwarded to A, whose agent gets the option.
    turn_id, approval = await _asked(a, b, session.id, "/permission")
    assert session.id in a.core.runners and session.id not in b.core.runners
    answered, _ = await b.answer_approval(ME, approval.id, "allow")
    assert answered.outcome is ApprovalOutcome.SELECTED and answered.answered_by == ME
    turn = await finished(a, session.id, turn_id)
    assert turn.output == "permission: allow"
    (kept,) = await b.approvals_of_turn(turn_id)
    assert (kept.outcome, kept.option_id, kept.answered_by) == (
        ApprovalOutcome.SELECTED,
        "allow",
        ME,
    )
    assert kept.answered_at == answered.answered_at
    # 2. Raced from both instances: one wins, every other answer is APPROVAL_RESOLVED.
    turn_id, approval = await _asked(a, b, session.id, "/permission")
    results = await asyncio.gather(
        b.answer_approval(ME, approval.id, "reject"),
        a.answer_approval(ME, approval.id, "allow"),
        b.answer_approval(ME, approval.id, "allow"),
        return_exceptions=True,
    )
    errors = [r for r in results if isinstance(r, BaseException)]
    assert len(errors) == 2, results
    assert all(isinstance(e, Conflict) and e.code is ErrorCode.APPROVAL_RESOLVED for e in errors)
    winner, _ = next(r for r in results if not isinstance(r, BaseException))
    turn = await finished(a, session.id, turn_id)
    assert turn.output == f"permission: {winner.option_id}"
    (kept,) = await a.approvals_of_turn(turn_id)
    assert kept.option_id == winner.option_id
    # 3. An ended turn's approval cannot be answered, on either instance.
    for engine in (a, b):
        with pytest.raises(Conflict) as refused:
            await engine.answer_approval(ME, approval.id, "allow")
        assert refused.value.code is ErrorCode.APPROVAL_RESOLVED


async def test_a10_m4_an_expiry_on_the_owner_races_an_answer_forwarded_from_another_instance(
    pair: tuple[Engine, Engine],
) -> None:
    """A10 with M4: the approval's expiry on A (its turn's instance) and a user's answer sent
    to B (forwarded to A) race: exactly one is recorded and is what the agent got; a losing
    user gets APPROVAL_RESOLVED, a losing expiry answers nothing."""
    a, b = pair
    _, session = await a.create_task(ME, "t", "fake")

    async def started() -> bool:
        found = await a.session(ME, session.id)
        return found.state is SessionState.WAITING_FOR_INPUT

    await until(started, "the agent to start on A")
    turn_id, approval = await _asked(a, b, session.id, "/permission")
    answered, expired = await asyncio.gather(
        b.answer_approval(ME, approval.id, "allow"),
        a.approvals.expire(approval.id),
        return_exceptions=True,
    )
    if expired is True:
        assert isinstance(answered, Conflict) and answered.code is ErrorCode.APPROVAL_RESOLVED
        winner, by = "reject", "system"
    else:
        assert expired is False and not isinstance(answered, BaseException), answered
        winner, by = "allow", ME
    turn = await finished(a, session.id, turn_id)
    assert turn.output == f"permission: {winner}"
    (kept,) = await b.approvals_of_turn(turn_id)
    assert (kept.outcome, kept.option_id, kept.answered_by) == (
        ApprovalOutcome.SELECTED,
        winner,
        by,
    )
