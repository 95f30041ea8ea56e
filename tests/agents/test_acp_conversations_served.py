"""A8 through real ``turnqueue serve`` processes (uvloop, real sockets): a conversation survives a
restart of the server (both stores) and the SIGKILL of the instance that ran it, whose session
another instance takes over (PostgreSQL); the session's end closes the agent's session on the
instance that runs it (PostgreSQL). The fake ACP agent keeps its sessions on disk
(``FAKE_ACP_STORE``), so only the session's records can continue its conversation: ``/count``
counts on when they did."""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from clients import poll
from ops.ops_helpers import Client, ProcServer
from test_acp_served import FAKE, process_gone, ready_session, run_turn

CONVERSATION = """query($s: ID!) { session(id: $s) { agentConversation {
  agentSessionId resumed resumeError canResume canLoad canClose updatedAt } } }"""

TASK_OF = "query($s: ID!) { session(id: $s) { taskId } }"


def agents_file(tmp_path: Path) -> Path:
    command = f'["{sys.executable}", "{FAKE}"]'
    store = tmp_path / "agent-sessions"
    path = tmp_path / "agents.toml"
    path.write_text(
        f"""
default = "resumer"

[agents.resumer]
type = "acp"
command = {command}
env = {{ FAKE_ACP_RESUME = "resume", FAKE_ACP_CLOSE = "1", FAKE_ACP_STORE = "{store}" }}
workspace = "{tmp_path / "work"}"
start_timeout = 30

[agents.exclusive]
type = "acp"
command = {command}
env = {{ FAKE_ACP_RESUME = "resume", FAKE_ACP_EXCLUSIVE = "1", FAKE_ACP_STORE = "{store}" }}
workspace = "{tmp_path / "work"}"
start_timeout = 30

[agents.loader]
type = "acp"
command = {command}
env = {{ FAKE_ACP_RESUME = "load", FAKE_ACP_STORE = "{store}" }}
workspace = "{tmp_path / "work"}"
start_timeout = 30
""",
        encoding="utf-8",
    )
    return path


WORKFLOW = """
[[steps]]
name = "PLAN"

[[steps]]
name = "BUILD"
new_session_on_enter = true
"""


def server(database_url: str, tmp_path: Path, name: str) -> ProcServer:
    workflow = tmp_path / "workflow.toml"
    workflow.write_text(WORKFLOW, encoding="utf-8")
    return ProcServer(
        database_url,
        tmp_path / f"{name}.log",
        TURNQUEUE_AGENTS_FILE=str(agents_file(tmp_path)),
        TURNQUEUE_WORKFLOW_FILE=str(workflow),
        TURNQUEUE_CANCEL_TIMEOUT="1.0",
        TURNQUEUE_ESCALATION_TIMEOUT="1.0",
    )


@pytest.fixture
async def servers() -> AsyncIterator[list[ProcServer]]:
    started: list[ProcServer] = []
    yield started
    for each in started:
        each.stop()


async def conversation(client: Client, session: str) -> dict[str, Any]:
    found: dict[str, Any] = (await client.data(CONVERSATION, s=session))["session"][
        "agentConversation"
    ]
    return found


@pytest.mark.parametrize(("agent", "resumed"), [("resumer", "RESUMED"), ("loader", "LOADED")])
async def test_a8_a_restarted_server_continues_the_agent_conversation(
    database_url: str, tmp_path: Path, servers: list[ProcServer], agent: str, resumed: str
) -> None:
    served = server(database_url, tmp_path, "server")
    servers.append(await served.start())
    async with served.client() as client:
        session = await ready_session(client, agent)
        assert (await run_turn(client, session, "remember 42"))["output"] == "echo: remember 42"
        first = await conversation(client, session)
        assert first["resumed"] == "NEW" and first["resumeError"] is None
        assert (first["canResume"], first["canLoad"]) == (agent == "resumer", agent == "loader")
    assert served.term() in (0, -15)  # a deploy: the agent stops with the server
    await served.start()
    async with served.client() as client:
        turn = await run_turn(client, session, "/count")
        assert turn["status"] == "COMPLETED" and turn["output"] == "count=2"
        # session/load's replayed history is in no turn
        assert turn["items"] == [{"index": 0, "kind": "MESSAGE", "text": "count=2"}]
        again = await conversation(client, session)
        assert again["resumed"] == resumed and again["resumeError"] is None
        assert again["agentSessionId"] == first["agentSessionId"]
    assert f"continued its session {first['agentSessionId']} ({resumed})" in served.log_text()


async def test_a8_m6_another_instance_resumes_the_conversation_of_a_killed_owner(
    pg_database_url: str, tmp_path: Path, servers: list[ProcServer]
) -> None:
    a = server(pg_database_url, tmp_path, "a")
    b = server(pg_database_url, tmp_path, "b")
    for each in (a, b):  # one after the other: the first runs the migrations
        servers.append(await each.start())
    async with a.client() as client:
        session = await ready_session(client, "resumer")
        await run_turn(client, session, "remember 42")
        who = (await run_turn(client, session, "/whoami"))["output"]
        first = await conversation(client, session)
    pid = int(who.split("pid=")[1].split()[0])
    a.kill()  # SIGKILL: no shutdown path runs; its agent lives on until B's recovery (M6)

    async def reaped() -> bool:
        return process_gone(pid)

    await poll(reaped, "B's recovery to kill A's agent", timeout=60)
    async with b.client() as client:
        turn = await run_turn(client, session, "/count")
        assert turn["status"] == "COMPLETED" and turn["output"] == "count=3"
        again = await conversation(client, session)
        assert again["resumed"] == "RESUMED"
        assert again["agentSessionId"] == first["agentSessionId"]


async def test_a8_m4_a_session_ended_on_b_closes_its_agent_session_on_a(
    pg_database_url: str, tmp_path: Path, servers: list[ProcServer]
) -> None:
    """The agent runs on A; a workflow transfer (W3) asked of B ends the session: A's agent
    gets ``session/close`` (the fake agent marks its stored session closed) and stops."""
    a = server(pg_database_url, tmp_path, "a")
    b = server(pg_database_url, tmp_path, "b")
    for each in (a, b):
        servers.append(await each.start())
    async with a.client() as client:
        session = await ready_session(client, "resumer")
        task = (await client.data(TASK_OF, s=session))["session"]["taskId"]
        who = (await run_turn(client, session, "/whoami"))["output"]
        agent_session = (await conversation(client, session))["agentSessionId"]
    pid = int(who.split("pid=")[1].split()[0])
    record = tmp_path / "agent-sessions" / f"{agent_session}.json"
    assert json.loads(record.read_text(encoding="utf-8"))["closed"] is False
    async with b.client() as client:
        await client.ok("moveTask", "task { id }", taskId=task, step="BUILD")

    async def closed() -> bool:
        return bool(json.loads(record.read_text(encoding="utf-8"))["closed"])

    await poll(closed, "A's agent to close its session", timeout=60)

    async def stopped() -> bool:
        return process_gone(pid)

    await poll(stopped, "A's agent to stop", timeout=60)


async def test_a8_m4_a_turn_on_b_resumes_the_session_whose_idle_agent_runs_on_a(
    pg_database_url: str, tmp_path: Path, servers: list[ProcServer]
) -> None:
    """An agent that refuses to resume a session another of its processes holds (fast-agent
    does; here the fake agent with FAKE_ACP_EXCLUSIVE): B asks A to stop its idle agent first,
    so the turn on B continues the conversation instead of forking it."""
    a = server(pg_database_url, tmp_path, "a")
    b = server(pg_database_url, tmp_path, "b")
    for each in (a, b):
        servers.append(await each.start())
    async with a.client() as client:
        session = await ready_session(client, "exclusive")
        who = (await run_turn(client, session, "/whoami"))["output"]
        first = await conversation(client, session)
    pid = int(who.split("pid=")[1].split()[0])
    async with b.client() as client:
        turn = await run_turn(client, session, "/count")
        assert turn["status"] == "COMPLETED" and turn["output"] == "count=2"
        again = await conversation(client, session)
        assert again["resumed"] == "RESUMED" and again["resumeError"] is None
        assert again["agentSessionId"] == first["agentSessionId"]
    assert process_gone(pid)  # A stopped its agent before B's resumed the session
