"""The ``acp`` profile through the real served process (``python -m turnqueue serve``, uvicorn's
default loop: uvloop), on both stores, against the fake ACP agent (SPEC A1-A7)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from clients import poll
from ops.ops_helpers import REPO, Client, ProcServer

FAKE = Path(__file__).with_name("fake_acp_agent.py")

TURN = """
query($s: ID!) { session(id: $s) { state agentError
  queue { heldBy count }
  currentTurn { id status output error
    items { index kind
      ... on MessageItem { text }
      ... on ThoughtItem { text }
      ... on ToolCallItem { toolCallId title toolKind status text contentJson
                            locations { path line } }
      ... on PlanItem { entries { content priority status } }
      ... on RawItem { json } } } } }
"""


def agents_file(tmp_path: Path) -> Path:
    command = f'["{sys.executable}", "{FAKE}"]'
    path = tmp_path / "agents.toml"
    path.write_text(
        f"""
default = "fake"

[agents.fake]
type = "acp"
command = {command}
workspace = "{tmp_path / "work"}"
start_timeout = 30

[agents.fakeload]
type = "acp"
command = {command}
env = {{ FAKE_ACP_LOAD = "1", FROM_SERVER = "${{TQ_TEST_SECRET}}" }}
workspace = "{tmp_path / "work"}"

[agents.broken]
type = "acp"
command = {command}
env = {{ FAKE_ACP_FAIL_START = "1" }}

[agents.demo]
type = "scripted"
turn_seconds = 0.1
""",
        encoding="utf-8",
    )
    return path


@pytest.fixture
async def served(database_url: str, tmp_path: Path) -> AsyncIterator[ProcServer]:
    server = ProcServer(
        database_url,
        tmp_path / "server.log",
        TURNQUEUE_AGENTS_FILE=str(agents_file(tmp_path)),
        TURNQUEUE_CANCEL_TIMEOUT="1.0",
        TURNQUEUE_ESCALATION_TIMEOUT="1.0",
        TQ_TEST_SECRET="s3cret",
    )
    await server.start()
    try:
        yield server
    finally:
        server.stop()


async def ready_session(client: Client, agent: str | None = None) -> str:
    session = await client.create_session(agent)

    async def state() -> str | None:
        data = await client.data(TURN, s=session)
        value: str = data["session"]["state"]
        return value if value != "STARTING" else None

    assert await poll(state, "the agent to start", timeout=60) == "WAITING_FOR_INPUT"
    return session


async def run_turn(client: Client, session: str, prompt: str) -> dict[str, Any]:
    """Send ``prompt`` and wait for its turn to end; the turn."""
    sent = await client.ok("sendMessage", "turn { id }", sessionId=session, content=prompt)
    turn_id = sent["turn"]["id"]
    return await ended(client, session, turn_id)


async def ended(client: Client, session: str, turn_id: str) -> dict[str, Any]:
    async def check() -> dict[str, Any] | None:
        turn: dict[str, Any] = (await client.data(TURN, s=session))["session"]["currentTurn"]
        return turn if turn["id"] == turn_id and turn["status"] != "RUNNING" else None

    result: dict[str, Any] = await poll(check, f"turn {turn_id} to end", timeout=60)
    return result


async def test_a1_agents_query_default_profile_and_unknown_name(served: ProcServer) -> None:
    """A1: `agents` lists names and types only; the file's default applies; unknown names are
    INVALID_INPUT."""
    async with served.client() as client:
        data = await client.data("{ agents { name type } }")
        assert data["agents"] == [
            {"name": "broken", "type": "ACP"},
            {"name": "command", "type": "COMMAND"},
            {"name": "demo", "type": "SCRIPTED"},
            {"name": "fake", "type": "ACP"},
            {"name": "fakeload", "type": "ACP"},
            {"name": "scripted", "type": "SCRIPTED"},
        ]
        bad = await client.gql("{ agents { name env } }")
        assert "errors" in bad  # there is no way to read a profile's environment
        refused = await client.mutate("createTask", "task { id }", title="x", agent="claude")
        assert refused["userErrors"][0]["code"] == "INVALID_INPUT"
        created = await client.ok("createTask", "session { agent state }", title="x")
        assert created["session"] == {"agent": "fake", "state": "STARTING"}
        demo = await ready_session(client, "demo")
        turn = await run_turn(client, demo, "hi")
        assert turn["status"] == "COMPLETED"
        assert turn["items"] == [{"index": 0, "kind": "MESSAGE", "text": turn["output"]}]


async def test_a2_a3_one_process_per_session_and_structured_items(served: ProcServer) -> None:
    """A2: the session's agent starts with it, in <workspace>/<task id>, and serves every turn;
    A3: tool calls (updated in place), plans, thoughts and raw updates are turn items."""
    async with served.client() as client:
        created = await client.ok("createTask", "task { id } session { id }", title="t")
        session, task = created["session"]["id"], created["task"]["id"]

        async def ready() -> bool:
            state = (await client.data(TURN, s=session))["session"]["state"]
            return bool(state == "WAITING_FOR_INPUT")

        await poll(ready, "the agent to start", timeout=60)
        first = await run_turn(client, session, "/whoami")
        assert first["status"] == "COMPLETED"
        assert first["output"].endswith(f"/work/{task}")
        assert (await run_turn(client, session, "/whoami"))["output"] == first["output"]

        tool = await run_turn(client, session, "/tool")
        assert tool["status"] == "COMPLETED" and tool["output"] == "read it"
        call, message = tool["items"]
        assert call["kind"] == "TOOL_CALL" and call["toolCallId"] == "call-1"
        assert (call["title"], call["toolKind"], call["status"]) == (
            "Read file",
            "read",
            "completed",
        )
        assert call["text"] == "file contents"
        assert call["locations"] == [{"path": "/tmp/notes.txt", "line": 3}]
        assert message == {"index": 1, "kind": "MESSAGE", "text": "read it"}

        plan = (await run_turn(client, session, "/plan"))["items"][0]
        assert plan["entries"] == [
            {"content": "look", "priority": "high", "status": "completed"},
            {"content": "fix", "priority": "medium", "status": "pending"},
        ]
        thought = (await run_turn(client, session, "/thought"))["items"][0]
        assert thought == {"index": 0, "kind": "THOUGHT", "text": "thinking"}
        raw = (await run_turn(client, session, "/raw"))["items"][0]
        assert raw["kind"] == "RAW" and "available_commands_update" in raw["json"]


async def test_a2_an_agent_that_cannot_start_fails_the_session(served: ProcServer) -> None:
    async with served.client() as client:
        session = await client.create_session("broken")

        async def failed() -> str | None:
            data = (await client.data(TURN, s=session))["session"]
            return data["agentError"] if data["state"] == "FAILED" else None

        reason = await poll(failed, "the session to fail", timeout=60)
        assert "no credentials" in reason
        refused = await client.mutate("sendMessage", "turn { id }", sessionId=session, content="x")
        assert refused["userErrors"][0]["code"] == "SESSION_NOT_PROMPTABLE"


async def test_a2_prompts_sent_while_the_agent_starts_are_queued_then_run(
    served: ProcServer,
) -> None:
    async with served.client() as client:
        session = await client.create_session("fake")
        queued = await client.ok(
            "sendMessage", "turn { id } queuedEntry { id }", sessionId=session, content="early"
        )
        if queued["turn"] is None:  # still STARTING: queued, then run once the agent is ready

            async def done() -> dict[str, Any] | None:
                turn = (await client.data(TURN, s=session))["session"]["currentTurn"]
                return turn if turn and turn["status"] != "RUNNING" else None

            turn = await poll(done, "the queued prompt to run", timeout=60)
        else:
            turn = await ended(client, session, queued["turn"]["id"])
        assert turn["output"] == "echo: early"


#: (prompt, cancel it?, expected end). Every cell must end, and the session take the next prompt.
FAULTS = [
    ("/crash", False, "FAILED"),
    ("/crash-permission", False, "FAILED"),
    ("/refusal", False, "FAILED"),
    ("/max_tokens", False, "FAILED"),
    ("/stderr", False, "COMPLETED"),
    ("/bigline", False, "COMPLETED"),
    ("/exit", False, "COMPLETED"),
    ("/slow", True, "CANCELLED"),
    ("/deaf", True, "CANCELLED"),
    ("/stubborn", True, "CANCELLED"),
    ("/permission", True, "CANCELLED"),
]


async def test_a4_a5_a7_fault_matrix_every_cell_ends_and_the_next_prompt_runs(
    served: ProcServer,
) -> None:
    """A4, A5, A7: crashes, stop reasons, floods, deaf agents and pending permission requests
    all reach a terminal turn (cancel ends within the cancel timeout + escalation: never
    TIMED_OUT), and the session's next prompt is accepted and answered."""
    async with served.client() as client:
        for agent in ("fake", "fakeload"):
            session = await ready_session(client, agent)
            for prompt, cancel, expected in FAULTS:
                sent = await client.ok(
                    "sendMessage", "turn { id }", sessionId=session, content=prompt
                )
                turn_id = sent["turn"]["id"]
                if cancel:

                    async def streaming() -> bool:
                        turn = (await client.data(TURN, s=session))["session"]["currentTurn"]
                        return bool(turn["items"])

                    await poll(streaming, f"{prompt} to stream", timeout=60)
                    outcome = await client.ok("cancel", "outcome", sessionId=session)
                    assert outcome["outcome"] in ("STOPPED", "ESCALATED"), (prompt, outcome)
                turn = await ended(client, session, turn_id)
                assert turn["status"] == expected, (agent, prompt, turn)
                if prompt == "/crash":
                    assert "fatal error in the middle of a turn" in turn["error"]
                if prompt == "/bigline":
                    assert turn["output"] == "y" * 65536
                after = await run_turn(client, session, f"after {prompt}")
                assert after["status"] == "COMPLETED", (agent, prompt, after)
                assert after["output"] == f"echo: after {prompt}"


async def test_a4_session_load_resumes_the_agent_session_after_a_crash(
    served: ProcServer,
) -> None:
    async with served.client() as client:
        session = await ready_session(client, "fakeload")
        who = (await run_turn(client, session, "/whoami"))["output"]
        agent_session = who.split("session=")[1].split()[0]
        assert (await run_turn(client, session, "/crash"))["status"] == "FAILED"
        again = (await run_turn(client, session, "/whoami"))["output"]
        assert f"session={agent_session} " in again and "loaded=1" in again


async def test_a2_agents_are_stopped_at_shutdown(served: ProcServer) -> None:
    async with served.client() as client:
        session = await ready_session(client)
        who = (await run_turn(client, session, "/whoami"))["output"]
    pid = int(who.split("pid=")[1].split()[0])
    os.kill(pid, 0)  # alive
    assert served.term() == 0

    def gone() -> bool:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        # a zombie whose parent (the server) has exited is reaped by init
        with contextlib.suppress(OSError):
            return Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"
        return True

    async def check() -> bool:
        return gone()

    await poll(check, "the agent process to exit")


def test_a1_a_bad_agents_file_stops_the_server_at_start(tmp_path: Path) -> None:
    bad = tmp_path / "agents.toml"
    bad.write_text('[agents.x]\ntype = "acp"\n', encoding="utf-8")
    env = {**os.environ, "TURNQUEUE_AGENTS_FILE": str(bad)}
    env["TURNQUEUE_DATABASE_URL"] = f"sqlite:///{tmp_path / 'x.db'}"
    done = subprocess.run(
        [sys.executable, "-m", "turnqueue", "serve", "--port", "0"],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert f"agents file {bad}" in done.stderr and "needs a command" in done.stderr
