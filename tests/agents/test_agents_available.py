"""A1 (issue 26): only profiles that can run are listed and accepted.

``command`` runs ``TURNQUEUE_AGENT_COMMAND``: without one it is not a profile (``agents`` does not
list it), ``createTask(agent: "command")`` is ``INVALID_INPUT`` saying what is missing and creates
nothing, and a server whose default profile it is refuses to start. (Before, it was listed and
accepted, and the first turn failed.) The served half is in ``tests/ops/test_ops_startup.py``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from turnqueue.agents import AcpAgent, ProfileError, agent_profile, build_agents
from turnqueue.bus import EventBus
from turnqueue.engine import Engine
from turnqueue.errors import ErrorCode, InvalidInput
from turnqueue.settings import Settings
from turnqueue.store.sql import open_store


def test_a1_command_is_a_profile_only_with_a_command() -> None:
    without, default = build_agents(Settings(agent_command=""))
    assert sorted(without) == ["scripted"] and default == "scripted"
    blank, _ = build_agents(Settings(agent_command="   "))
    assert sorted(blank) == ["scripted"]
    with_command, _ = build_agents(Settings(agent_command="my-agent --flag"))
    assert sorted(with_command) == ["command", "scripted"]


def test_a1_a_default_that_cannot_run_stops_the_server() -> None:
    with pytest.raises(ProfileError, match="TURNQUEUE_AGENT_COMMAND"):
        build_agents(Settings(agent="command", agent_command=""))
    agents, default = build_agents(Settings(agent="command", agent_command="my-agent"))
    assert default == "command" and "command" in agents


def test_a1_an_agents_file_may_define_command_itself(tmp_path: Path) -> None:
    """A file's own ``command`` profile runs its own command line: it is listed."""
    path = tmp_path / "agents.toml"
    path.write_text('default = "command"\n[agents.command]\ntype = "command"\ncommand = ["make"]\n')
    agents, default = build_agents(Settings(agents_file=path, agent_command=""))
    assert sorted(agents) == ["command", "scripted"] and default == "command"


async def test_a1_create_task_with_command_but_no_command_is_refused(database_url: str) -> None:
    settings = Settings(database_url=database_url, agent_command="")
    store = await open_store(settings)
    engine = await Engine.open(settings, store, EventBus(64))
    try:
        assert [p.name for p in engine.agents()] == ["scripted"]
        with pytest.raises(InvalidInput) as refused:
            await engine.create_task("alice", "needs a command", "command")
        assert refused.value.code is ErrorCode.INVALID_INPUT
        assert refused.value.field == ["agent"]
        assert "TURNQUEUE_AGENT_COMMAND" in refused.value.message
        assert "agents are scripted" in refused.value.message
        assert await engine.tasks("alice", first=10) == []  # nothing was created
    finally:
        await engine.aclose()
        await store.close()


def test_q16_profiles_say_whether_a_steer_send_may_be_taken(tmp_path: Path) -> None:
    """Q16 (``agents { steering }``): scripted takes steered messages, a command never does, an
    ``acp`` profile does until its agent said it has no ``_session/steering`` method."""
    path = tmp_path / "agents.toml"
    path.write_text('[agents.coder]\ntype = "acp"\ncommand = ["coder-acp"]\n')
    agents, _ = build_agents(Settings(agents_file=path, agent_command="my-agent"))
    steering = {name: agent_profile(name, agent).steering for name, agent in agents.items()}
    assert steering == {"coder": True, "command": False, "scripted": True}
    coder = agents["coder"]
    assert isinstance(coder, AcpAgent)
    coder.steering = False  # what AcpRun.steer records on "method not found"
    assert agent_profile("coder", coder).steering is False
