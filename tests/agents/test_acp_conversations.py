"""A8 in process: a session's agent conversation survives its agent. Each test restarts the
engine (a new instance on the same database, new agents with nothing in memory) between two
prompts, and the fake ACP agent keeps its sessions on disk (``FAKE_ACP_STORE``), so only what
the session's records keep can continue the conversation: ``/count`` counts on when it did."""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
from engine_waits import ME, finished, send, started, until

from turnqueue.agents import Agent
from turnqueue.agents.acp import AcpAgent
from turnqueue.agents.profiles import Profile
from turnqueue.bus import EventBus
from turnqueue.domain import AgentType, ConversationStart, ItemKind, Turn
from turnqueue.engine import Engine
from turnqueue.settings import Settings
from turnqueue.store import Store
from turnqueue.store.sql import open_store

FAKE = Path(__file__).with_name("fake_acp_agent.py")
WORKFLOW = """
[[steps]]
name = "PLAN"

[[steps]]
name = "BUILD"
new_session_on_enter = true
"""
#: profile → the fake agent's conversation env (its store is added per test)
PROFILES = {
    "resumer": {"FAKE_ACP_RESUME": "resume", "FAKE_ACP_CLOSE": "1"},
    "loader": {"FAKE_ACP_RESUME": "load"},
    "forgetful": {"FAKE_ACP_RESUME": "none"},
}


@dataclass
class World:
    settings: Settings
    store: Store
    tmp_path: Path

    @property
    def agent_store(self) -> Path:
        return self.tmp_path / "agent-sessions"

    def agents(self) -> dict[str, Agent]:
        made: dict[str, Agent] = {
            name: AcpAgent(
                Profile(
                    name=name,
                    type=AgentType.ACP,
                    command=(sys.executable, str(FAKE)),
                    workspace=self.tmp_path / "work",
                    start_timeout=30,
                    env={**env, "FAKE_ACP_STORE": str(self.agent_store)},
                )
            )
            for name, env in PROFILES.items()
        }
        resumer = made["resumer"]
        assert isinstance(resumer, AcpAgent)
        made["sleepy"] = AcpAgent(replace(resumer.profile, name="sleepy", idle_timeout=0.05))
        return made

    @asynccontextmanager
    async def engine(self) -> AsyncIterator[Engine]:
        """One life of the server: an engine with fresh agents, closed (its agents stopped)
        at the end."""
        opened = await Engine.open(self.settings, self.store, EventBus(64), agents=self.agents())
        try:
            yield opened
        finally:
            await opened.aclose()


@pytest.fixture
async def world(database_url: str, tmp_path: Path) -> AsyncIterator[World]:
    workflow = tmp_path / "workflow.toml"
    workflow.write_text(WORKFLOW, encoding="utf-8")
    settings = Settings(
        database_url=database_url,
        cancel_timeout=1.0,
        escalation_timeout=1.0,
        workflow_file=workflow,
    )
    store = await open_store(settings)
    try:
        yield World(settings, store, tmp_path)
    finally:
        await store.close()


async def prompt(engine: Engine, session_id: str, text: str) -> Turn:
    return await finished(engine, session_id, (await send(engine, session_id, text)).id)


async def test_a8_a_restarted_server_resumes_the_agent_session(world: World) -> None:
    async with world.engine() as engine:
        _, session_id = await started(engine, "resumer")
        assert (await prompt(engine, session_id, "remember 42")).output == "echo: remember 42"
        first = await engine.agent_conversation(session_id)
        assert first is not None and first.resumed is ConversationStart.NEW
        assert (first.can_resume, first.can_load, first.can_close) == (True, False, True)
    async with world.engine() as engine:
        turn = await prompt(engine, session_id, "/count")
        assert turn.output == "count=2"  # the agent's own session went on
        again = await engine.agent_conversation(session_id)
        assert again is not None
        assert again.resumed is ConversationStart.RESUMED and again.resume_error is None
        assert again.agent_session_id == first.agent_session_id


async def test_a8_a_loaded_session_keeps_its_replayed_history_out_of_the_turn(
    world: World,
) -> None:
    async with world.engine() as engine:
        _, session_id = await started(engine, "loader")
        await prompt(engine, session_id, "remember 42")
    async with world.engine() as engine:
        turn = await prompt(engine, session_id, "/count")
        assert turn.output == "count=2"  # not "remember 42", not "replayed history"
        kinds = [i.kind for i in await engine.turn_items(turn.id)]
        assert kinds == [ItemKind.MESSAGE]
        conversation = await engine.agent_conversation(session_id)
        assert conversation is not None and conversation.resumed is ConversationStart.LOADED
        assert (conversation.can_resume, conversation.can_load) == (False, True)


async def test_a8_a_resume_the_agent_refuses_falls_back_to_a_new_session_and_says_why(
    world: World,
) -> None:
    async with world.engine() as engine:
        _, session_id = await started(engine, "resumer")
        await prompt(engine, session_id, "remember 42")
        first = await engine.agent_conversation(session_id)
        assert first is not None
    # The agent lost its session (its own store wiped): session/resume is refused.
    (world.agent_store / f"{first.agent_session_id}.json").unlink()
    async with world.engine() as engine:
        turn = await prompt(engine, session_id, "/count")
        assert turn.status.value == "COMPLETED" and turn.output == "count=1"
        again = await engine.agent_conversation(session_id)
        assert again is not None and again.resumed is ConversationStart.NEW
        assert again.agent_session_id != first.agent_session_id
        assert again.resume_error is not None
        assert again.resume_error.startswith("session/resume failed: agent error -32002")


async def test_a8_an_agent_that_offers_neither_opens_a_new_session(world: World) -> None:
    async with world.engine() as engine:
        _, session_id = await started(engine, "forgetful")
        await prompt(engine, session_id, "remember 42")
    async with world.engine() as engine:
        assert (await prompt(engine, session_id, "/count")).output == "count=1"
        conversation = await engine.agent_conversation(session_id)
        assert conversation is not None and conversation.resumed is ConversationStart.NEW
        assert conversation.resume_error is None


async def test_a8_an_agent_crash_resumes_the_session_on_the_next_prompt(world: World) -> None:
    async with world.engine() as engine:
        _, session_id = await started(engine, "resumer")
        await prompt(engine, session_id, "remember 42")
        assert (await prompt(engine, session_id, "/crash")).status.value == "FAILED"
        assert (await prompt(engine, session_id, "/count")).output == "count=3"
        conversation = await engine.agent_conversation(session_id)
        assert conversation is not None and conversation.resumed is ConversationStart.RESUMED


async def test_a8_ending_the_session_closes_the_agent_session(world: World) -> None:
    """A8 with W3: the session a transfer completes closes its agent's session."""
    async with world.engine() as engine:
        task_id, session_id = await started(engine, "resumer")
        await prompt(engine, session_id, "remember 42")
        conversation = await engine.agent_conversation(session_id)
        assert conversation is not None
        record = world.agent_store / f"{conversation.agent_session_id}.json"
        assert json.loads(record.read_text(encoding="utf-8"))["closed"] is False
        await engine.move_task(ME, task_id, "BUILD")

        async def closed() -> bool:
            return bool(json.loads(record.read_text(encoding="utf-8"))["closed"])

        await until(closed, "the agent session to be closed")


async def test_a8_an_agent_stopped_when_idle_resumes_the_session_on_the_next_prompt(
    world: World,
) -> None:
    async with world.engine() as engine:
        _, session_id = await started(engine, "sleepy")
        agent = engine.core.agents["sleepy"]
        assert isinstance(agent, AcpAgent)

        async def stopped() -> bool:
            return agent.process_of(session_id) is None

        await until(stopped, "the idle agent to stop")
        await prompt(engine, session_id, "remember 42")
        await until(stopped, "the idle agent to stop again")
        assert (await prompt(engine, session_id, "/count")).output == "count=2"
        conversation = await engine.agent_conversation(session_id)
        assert conversation is not None and conversation.resumed is ConversationStart.RESUMED
