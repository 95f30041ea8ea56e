"""Stalls end (SPEC A9) and approvals expire (A10), through the engine, in process, with the
fake ACP agent, the command agent and the scripted agent given tiny bounds."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from engine_probes import pending_approval
from engine_waits import ME, finished, send, started, until
from faults import FaultyStore, faults_of

from turnqueue.agents import Agent, CommandAgent, ProfileError, ScriptedAgent, build_agents
from turnqueue.agents.acp import AcpAgent
from turnqueue.agents.acp_run import PermissionRequest
from turnqueue.agents.base import Bounds, Watchdog
from turnqueue.agents.profiles import Profile, load_profiles
from turnqueue.bus import EventBus
from turnqueue.domain import (
    AgentErrorKind,
    AgentType,
    ApprovalOutcome,
    CancelOutcome,
    HoldReason,
    SessionState,
    Turn,
    TurnStatus,
)
from turnqueue.engine import Engine
from turnqueue.errors import Conflict, ErrorCode
from turnqueue.settings import Settings
from turnqueue.store.sql import open_store

FAKE = Path(__file__).with_name("fake_acp_agent.py")
#: A9 bounds small enough for a test, large enough for a loaded machine to show activity.
STALL = 0.6


@pytest.fixture
async def engine(database_url: str, tmp_path: Path) -> AsyncIterator[Engine]:
    settings = Settings(database_url=database_url, cancel_timeout=5.0, escalation_timeout=1.0)
    store = await open_store(settings)
    fake = Profile(
        name="fake",
        type=AgentType.ACP,
        command=(sys.executable, str(FAKE)),
        workspace=tmp_path / "work",
        start_timeout=30,  # the agent's own start (spawn, initialize, session/new)
    )
    tiny = Bounds(start=STALL, stall=STALL)
    agents: dict[str, Agent] = {
        # the prompt's first activity and the gaps between two bounded by STALL
        "stall": AcpAgent(fake, bounds=tiny),
        # A10: approvals expire after 0.3 s; stalls are far away
        "expiring": AcpAgent(replace(fake, name="expiring", approval_timeout=0.3)),
        # A9 + A10: an approval pending for longer than the stall bound is no stall
        "patient": AcpAgent(replace(fake, name="patient", approval_timeout=3 * STALL), bounds=tiny),
        # A10 without expiry: a person answers, or the test expires it
        "asking": AcpAgent(replace(fake, name="asking")),
        "scripted": ScriptedAgent(100.0, bounds=tiny),  # a chunk at once, the next 20 s later
        "silent-command": CommandAgent("sleep 60", bounds=tiny),
        "quiet-command": CommandAgent("sh -c 'echo started; exec sleep 60'", bounds=tiny),
    }
    seam: Any = FaultyStore(store)  # a Store, by delegation
    opened = await Engine.open(settings, seam, EventBus(64), agents=agents)
    try:
        yield opened
    finally:
        await opened.aclose()
        await store.close()


async def ready(engine: Engine, agent: str) -> str:
    return (await started(engine, agent))[1]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


async def test_a9_an_agent_silent_after_the_prompt_ends_stalled_and_the_next_gets_a_fresh_one(
    engine: Engine,
) -> None:
    """A9: a prompt the agent never answers and never acts on (``/silent``) ends FAILED with
    kind STALLED once its first-activity bound has passed; its agent is killed; the session
    takes the next prompt, which runs on a fresh agent process."""
    sid = await ready(engine, "stall")
    agent = engine.core.agents["stall"]
    assert isinstance(agent, AcpAgent)
    pid = agent.process_of(sid)
    assert pid is not None
    turn = await finished(engine, sid, (await send(engine, sid, "/silent")).id)
    assert turn.status is TurnStatus.FAILED and turn.error_kind is AgentErrorKind.STALLED
    assert turn.error == f"stalled: the agent showed no activity within {STALL:g} s of the prompt"
    await until(lambda: asyncio.sleep(0, not alive(pid)), "the stalled agent to be gone")
    session = await engine.session(ME, sid)
    assert session is not None and session.state is SessionState.WAITING_FOR_INPUT
    assert (await engine.cancellation(sid)).pending is False  # C5: nothing stuck
    after = await finished(engine, sid, (await send(engine, sid, "after")).id)
    assert (after.status, after.output) == (TurnStatus.COMPLETED, "echo: after")
    assert agent.process_of(sid) not in (None, pid)


async def test_a9_a_prompt_hung_after_an_update_ends_stalled_and_the_queue_goes_on(
    engine: Engine,
) -> None:
    """A9: one update, then nothing (a hung provider call): the turn keeps what it streamed and
    ends FAILED STALLED after the stall bound; the entry queued behind it runs next, as after
    any failure (Q4)."""
    sid = await ready(engine, "stall")
    hung = await send(engine, sid, "/hang-after-update")
    queued = await engine.send_message(ME, sid, "next")
    assert queued.entry is not None
    turn = await finished(engine, sid, hung.id)
    assert (turn.status, turn.error_kind) == (TurnStatus.FAILED, AgentErrorKind.STALLED)
    assert turn.error == f"stalled: no agent activity for {STALL:g} s"
    assert turn.output == "working on it"

    async def next_turn() -> Turn | None:
        turns = await engine.turns_of(sid, 10)
        return turns[-1] if turns[-1].id != hung.id and turns[-1].ended_at else None

    after = await until(next_turn, "the queued entry to run")
    assert (after.prompt, after.status, after.output) == (
        "next",
        TurnStatus.COMPLETED,
        "echo: next",
    )


async def test_a9_a_lively_agent_is_never_stalled(engine: Engine) -> None:
    """A9: the bound is on silence, not on the turn's length: a turn streaming a chunk every
    40 ms for longer than the stall bound completes."""
    sid = await ready(engine, "stall")
    turn = await finished(engine, sid, (await send(engine, sid, "/steps 40")).id)
    assert turn.status is TurnStatus.COMPLETED, turn.error


async def test_a9_c8_a_stall_during_a_cancel_ends_the_turn_cancelled_and_releases_it(
    engine: Engine,
) -> None:
    """A9 with C5/C8: a cancel reaches an agent that is deaf to ``session/cancel`` and silent;
    the stall kills it before the cancel ladder escalates. Pending wins (CANCELLED), the cancel
    ends, and its reference is released. Had the stall come first, the turn is FAILED STALLED
    and the cancel finds nothing to do; either way nothing stays pending."""
    sid = await ready(engine, "stall")
    turn = await send(engine, sid, "/hang-after-update")

    async def updated() -> bool:
        return bool(await engine.turn_items(turn.id))

    await until(updated, "the agent's one update")
    result = await engine.cancel(ME, sid)
    ended = await finished(engine, sid, turn.id)
    if result.outcome is CancelOutcome.NOTHING_RUNNING:  # the stall came first
        assert (ended.status, ended.error_kind) == (TurnStatus.FAILED, AgentErrorKind.STALLED)
    else:
        assert result.outcome is CancelOutcome.STOPPED  # ended within the interrupt wait
        assert ended.status is TurnStatus.CANCELLED
    assert (await engine.cancellation(sid)).pending is False
    after = await finished(engine, sid, (await send(engine, sid, "after")).id)
    assert after.output == "echo: after"


async def test_a9_a10_a_pending_approval_is_not_a_stall_and_the_clock_runs_again_after(
    engine: Engine,
) -> None:
    """A9/A10: the approval waits three stall bounds without a stall (the clock stands
    still while it is pending); it expires and is answered ``reject`` by ``system``; the agent
    then goes silent, and the turn stalls one bound later."""
    sid = await ready(engine, "patient")
    turn = await send(engine, sid, "/permission-then-hang")
    ended = await finished(engine, sid, turn.id)
    assert (ended.status, ended.error_kind) == (TurnStatus.FAILED, AgentErrorKind.STALLED)
    assert ended.output == "permission: reject"
    (approval,) = await engine.approvals_of_turn(turn.id)
    assert (approval.outcome, approval.option_id, approval.answered_by) == (
        ApprovalOutcome.SELECTED,
        "reject",
        "system",
    )


async def test_a10_an_expired_approval_is_answered_with_the_reject_option_by_system(
    engine: Engine,
) -> None:
    """A10: a pending approval whose ``approval_timeout`` passes is answered with the agent's
    reject option, recorded like any answer (by ``system``, when, which option); the hold on
    the queue ends; a user's late answer is refused APPROVAL_RESOLVED."""
    sid = await ready(engine, "expiring")
    turn = await send(engine, sid, "/permission")
    ended = await finished(engine, sid, turn.id)
    assert (ended.status, ended.output) == (TurnStatus.COMPLETED, "permission: reject")
    (approval,) = await engine.approvals_of_turn(turn.id)
    assert (approval.outcome, approval.option_id, approval.answered_by) == (
        ApprovalOutcome.SELECTED,
        "reject",
        "system",
    )
    assert approval.answered_at is not None and approval.answered_at >= approval.requested_at
    assert HoldReason.APPROVAL not in (await engine.queue_status(sid)).held_by
    with pytest.raises(Conflict) as late:
        await engine.answer_approval(ME, approval.id, "allow")
    assert late.value.code is ErrorCode.APPROVAL_RESOLVED


@pytest.mark.parametrize("first", ["user", "expiry"])
async def test_a10_an_expiry_racing_a_users_answer_answers_exactly_once(
    engine: Engine, first: str
) -> None:
    """A10/A6: an approval's expiry and a user's answer, concurrently: one wins and is the
    answer the agent gets and the record keeps; a losing user gets APPROVAL_RESOLVED, a losing
    expiry answers nothing."""
    sid = await ready(engine, "asking")
    turn = await send(engine, sid, "/permission")

    async def pending():  # type: ignore[no-untyped-def]
        return await pending_approval(engine, sid)

    approval = await until(pending, "the approval")
    user = engine.answer_approval(ME, approval.id, "allow")
    expiry = engine.approvals.expire(approval.id)
    both = [user, expiry] if first == "user" else [expiry, user]
    results = await asyncio.gather(*both, return_exceptions=True)
    answered, expired = (results[0], results[1]) if first == "user" else (results[1], results[0])
    if expired is True:
        assert isinstance(answered, Conflict) and answered.code is ErrorCode.APPROVAL_RESOLVED
        winner, by = "reject", "system"
    else:
        assert expired is False and not isinstance(answered, BaseException)
        winner, by = "allow", ME
    ended = await finished(engine, sid, turn.id)
    assert ended.output == f"permission: {winner}"
    (kept,) = await engine.approvals_of_turn(turn.id)
    assert (kept.outcome, kept.option_id, kept.answered_by) == (
        ApprovalOutcome.SELECTED,
        winner,
        by,
    )
    assert await engine.approvals.expire(approval.id) is False  # nothing left to expire


@pytest.mark.parametrize("agent", ["silent-command", "quiet-command", "scripted"])
async def test_a9_command_and_scripted_agents_are_bounded_too(engine: Engine, agent: str) -> None:
    """A9 for the other agents: a command that prints nothing, one that prints a line and then
    nothing, and a scripted reply whose next chunk is 20 s away all end FAILED STALLED (the
    command's process group killed), and the session takes its next prompt."""
    _, session = await engine.create_task(ME, "t", agent)
    sid = session.id
    turn = await finished(engine, sid, (await send(engine, sid, "hello")).id)
    assert (turn.status, turn.error_kind) == (TurnStatus.FAILED, AgentErrorKind.STALLED)
    assert turn.error is not None and turn.error.startswith("stalled: ")
    assert (await engine.cancellation(sid)).pending is False
    again = await send(engine, sid, "again")
    assert again.status is TurnStatus.RUNNING


# -- profiles and the watchdog on their own ------------------------------------------------------
def test_a9_a10_profile_keys_and_the_built_in_bounds(tmp_path: Path) -> None:
    """A9/A10: ``stall_timeout`` and ``approval_timeout`` come from the agents file (positive
    seconds; ``approval_timeout`` defaults to none); an ``acp`` profile's first activity is
    bounded by ``start_timeout``, a command's or a scripted one's by ``stall_timeout``; the
    built-in profiles and a profile without ``stall_timeout`` take TURNQUEUE_STALL_TIMEOUT."""
    path = tmp_path / "agents.toml"
    path.write_text(
        '[agents.claude]\ntype = "acp"\ncommand = ["claude-acp"]\nstart_timeout = 30\n'
        "stall_timeout = 120\napproval_timeout = 900\n"
        '[agents.build]\ntype = "command"\ncommand = ["make"]\n',
        encoding="utf-8",
    )
    loaded = load_profiles(path)
    claude, build = loaded.profiles["claude"], loaded.profiles["build"]
    assert (claude.stall_timeout, claude.approval_timeout) == (120, 900)
    assert claude.bounds(600) == Bounds(start=30, stall=120)
    assert build.approval_timeout is None and build.bounds(45) == Bounds(start=45, stall=45)
    agents, _ = build_agents(Settings(agents_file=path, agent_command="my-agent", stall_timeout=45))
    built = agents["claude"]
    assert isinstance(built, AcpAgent) and built.bounds == Bounds(start=30, stall=120)
    for name in ("scripted", "command", "build"):
        agent = agents[name]
        assert isinstance(agent, ScriptedAgent | CommandAgent)
        assert agent.bounds == Bounds(start=45, stall=45)
    assert Settings().stall_timeout == 600  # A9: 10 minutes by default
    path.write_text('[agents.a]\ntype = "acp"\ncommand = ["x"]\nstall_timeout = 0\n')
    with pytest.raises(ProfileError, match="stall_timeout"):
        load_profiles(path)
    path.write_text('[agents.a]\ntype = "acp"\ncommand = ["x"]\napproval_timeout = -1\n')
    with pytest.raises(ProfileError, match="approval_timeout"):
        load_profiles(path)
    path.write_text('[agents.a]\ntype = "command"\ncommand = ["x"]\napproval_timeout = 5\n')
    with pytest.raises(ProfileError, match="approval_timeout is for acp profiles only"):
        load_profiles(path)


async def test_a9_the_first_sign_of_life_shrinks_the_bound_to_the_stall_bound() -> None:
    """A9: armed with a long first-activity bound, a watchdog whose agent showed one sign of
    life expires after the (shorter) stall bound, not the first one."""
    watchdog = Watchdog(Bounds(start=3600, stall=0.05))
    watchdog.arm()
    watchdog.bump()
    async with asyncio.timeout(30):
        assert await watchdog.expired() == "stalled: no agent activity for 0.05 s"


async def test_a9_an_unarmed_watchdog_waits_for_the_prompt() -> None:
    """A9: the clock starts when the prompt reaches the agent (``arm``), not at the run's
    launch (an agent being started has its own bound)."""
    watchdog = Watchdog(Bounds(start=0.05, stall=0.05))
    watching = asyncio.create_task(watchdog.expired())
    await asyncio.sleep(0)
    assert not watching.done()
    watchdog.arm()
    async with asyncio.timeout(30):
        reason = await watching
    assert reason == "stalled: the agent showed no activity within 0.05 s of the prompt"


async def test_a10_an_approval_without_a_reject_option_expires_cancelled(engine: Engine) -> None:
    """A10: an agent that offers no reject option gets ``cancelled`` when its approval expires,
    recorded CANCELLED by ``system``."""
    sid = await ready(engine, "asking")
    turn = await send(engine, sid, "/silent")  # a running turn for the approval to belong to
    request = PermissionRequest(
        sid, turn.id, "Run rm", "call-9", (("yes", "Yes", "allow_once"),), timeout=0.05
    )
    async with asyncio.timeout(30):
        assert await engine.approvals.ask(request) is None
    (kept,) = await engine.approvals_of_turn(turn.id)
    assert (kept.outcome, kept.option_id, kept.answered_by) == (
        ApprovalOutcome.CANCELLED,
        None,
        "system",
    )
    assert kept.answered_at is not None
    assert HoldReason.APPROVAL not in (await engine.queue_status(sid)).held_by
    await engine.cancel(ME, sid)


async def test_a10_an_expiry_that_cannot_commit_answers_cancelled_once(engine: Engine) -> None:
    """A10: the expiry's answer does not commit (the database away): nothing was answered,
    so the agent gets ``cancelled`` and the approval is stored CANCELLED by ``system``, once;
    the hold ends and the session takes its next prompt."""
    sid = await ready(engine, "expiring")
    with faults_of(engine).failing("answer_approval") as failures:
        turn = await send(engine, sid, "/permission")
        ended = await finished(engine, sid, turn.id)
    assert failures() == 0  # the expiry's answer failed; the CANCELLED one went through
    assert ended.output == "permission: cancelled"
    (kept,) = await engine.approvals_of_turn(turn.id)
    assert (kept.outcome, kept.option_id, kept.answered_by) == (
        ApprovalOutcome.CANCELLED,
        None,
        "system",
    )
    assert HoldReason.APPROVAL not in (await engine.queue_status(sid)).held_by
    after = await finished(engine, sid, (await send(engine, sid, "after")).id)
    assert after.output == "echo: after"
