"""The ``acp`` profile through the real served process (``python -m turnqueue serve``, uvicorn's
default loop: uvloop), on both stores, against the fake ACP agent (SPEC A1-A7)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from clients import poll
from ops.ops_helpers import REPO, Client, ProcServer

FAKE = Path(__file__).with_name("fake_acp_agent.py")

TURN_FIELDS = """
fragment T on Turn { id status output error errorKind agentStderr
  items { index kind
    ... on MessageItem { text }
    ... on ThoughtItem { text }
    ... on ToolCallItem { toolCallId title toolKind status text contentJson
                          locations { path line } }
    ... on PlanItem { entries { content priority status } }
    ... on RawItem { json } } }
"""
TURN = (
    """query($s: ID!) { session(id: $s) { state agentError queue { heldBy count }
  currentTurn { ...T } } }"""
    + TURN_FIELDS
)
TURNS = """query($s: ID!) { session(id: $s) { turns(last: 10) { ...T } } }""" + TURN_FIELDS


TURN_APPROVAL = """
query($s: ID!) { session(id: $s) { revision queue { heldBy entries { id } }
  pendingApproval { id title toolCallId options { id name kind } requestedAt }
  currentTurn { id status output items { kind }
    approvals { id outcome optionId answeredBy answeredAt } } } }
"""
ANSWER = "approval { id outcome optionId } session { id }"


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
workspace = "{tmp_path / "work"}"

[agents.allowing]
type = "acp"
command = {command}
permissions = "allow"
workspace = "{tmp_path / "work"}"

[agents.steerable]
type = "acp"
command = {command}
env = {{ FAKE_ACP_STEER = "1" }}
workspace = "{tmp_path / "work"}"

[agents.keyed]
type = "acp"
command = {command}
env = {{ FAKE_ACP_AUTH = "1", FAKE_API_KEY = "${{TQ_TEST_SECRET}}" }}
workspace = "{tmp_path / "work"}"

[agents.keyless]
type = "acp"
command = {command}
env = {{ FAKE_ACP_AUTH = "1" }}
workspace = "{tmp_path / "work"}"

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
        # One instance, never restarted here: nothing waits for its lease to expire. ProcServer's
        # 1 s lease let a loaded machine's recovery sweep take a STARTING session for a dead one's.
        TURNQUEUE_LEASE_SECONDS="10",
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
        turns = (await client.data(TURNS, s=session))["session"]["turns"]
        turn: dict[str, Any] | None = next((t for t in turns if t["id"] == turn_id), None)
        return turn if turn is not None and turn["status"] != "RUNNING" else None

    result: dict[str, Any] = await poll(check, f"turn {turn_id} to end", timeout=60)
    return result


def process_gone(pid: int) -> bool:
    """The process has exited (reaped, or a zombie waiting for its parent to reap it)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"
    return True


async def test_a1_agents_query_default_profile_and_unknown_name(served: ProcServer) -> None:
    """A1: `agents` lists names and types only; the file's default applies; unknown names are
    INVALID_INPUT."""
    async with served.client() as client:
        data = await client.data("{ agents { name type } }")
        assert data["agents"] == [
            {"name": "allowing", "type": "ACP"},
            {"name": "broken", "type": "ACP"},
            {"name": "demo", "type": "SCRIPTED"},
            {"name": "fake", "type": "ACP"},
            {"name": "fakeload", "type": "ACP"},
            {"name": "keyed", "type": "ACP"},
            {"name": "keyless", "type": "ACP"},
            {"name": "scripted", "type": "SCRIPTED"},
            {"name": "steerable", "type": "ACP"},
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

        try:
            reason = await poll(failed, "the session to fail", timeout=60)
        except AssertionError:
            lines = [x for x in served.log_text().splitlines() if "HTTP/1.1" not in x]
            raise AssertionError("\n".join(lines[-40:])) from None
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
    ("/hang", True, "CANCELLED"),
    ("/error-auth", False, "FAILED"),
    ("/error-internal", False, "FAILED"),
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
                        data = (await client.data(TURN_APPROVAL, s=session))["session"]
                        return bool(data["currentTurn"]["items"] or data["pendingApproval"])

                    await poll(streaming, f"{prompt} to stream", timeout=60)
                    outcome = await client.ok("cancel", "outcome", sessionId=session)
                    assert outcome["outcome"] in ("STOPPED", "ESCALATED"), (prompt, outcome)
                turn = await ended(client, session, turn_id)
                assert turn["status"] == expected, (agent, prompt, turn)
                if prompt == "/crash":
                    assert turn["error"] == "agent process exited (status 3)"
                    assert turn["agentStderr"] == "fake agent: fatal error in the middle of a turn"
                if prompt == "/bigline":
                    assert turn["output"] == "y" * 65536
                if prompt == "/exit":  # it exits after its turn: wait until it is gone
                    pid = int(turn["output"].split("pid=")[1])

                    async def exited(pid: int = pid) -> bool:
                        return process_gone(pid)

                    await poll(exited, "the agent to exit")
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
    assert not process_gone(pid)
    assert served.term() in (0, -15)  # uvicorn may re-raise SIGTERM after its shutdown

    async def check() -> bool:
        return process_gone(pid)

    await poll(check, "the agent process to exit")


async def test_m6_a2_recovery_kills_the_acp_agents_a_crashed_server_left(
    served: ProcServer,
) -> None:
    """M6, A2: SIGKILL the server while one ACP session's agent runs a turn and another's sits
    idle, each with a helper child (as an MCP server is) in its process group. The helpers
    outlive the server; the restarted server kills both groups, ends the turn FAILED
    (interrupted), and the next prompt gets a fresh agent. Before, nothing recorded an ACP
    agent's process group and the helpers ran on."""

    def pid_of(turn: dict[str, Any], key: str = "pid") -> int:
        return int(turn["output"].split(f"{key}=")[1].split()[0])

    async with served.client() as client:
        busy, idle = await ready_session(client), await ready_session(client)
        busy_pid = pid_of(await run_turn(client, busy, "/whoami"))
        idle_pid = pid_of(await run_turn(client, idle, "/whoami"))
        helpers = [pid_of(await run_turn(client, s, "/helper"), "helper") for s in (busy, idle)]
        sent = await client.ok("sendMessage", "turn { id }", sessionId=busy, content="/slow")

        async def streaming() -> bool:
            turn = (await client.data(TURN, s=busy))["session"]["currentTurn"]
            return turn["id"] == sent["turn"]["id"] and bool(turn["items"])

        await poll(streaming, "the slow turn to stream")
    served.kill()
    assert not any(process_gone(pid) for pid in helpers)  # orphaned, alive
    await served.start()

    async def all_gone() -> bool:
        return all(process_gone(pid) for pid in (busy_pid, idle_pid, *helpers))

    await poll(all_gone, "recovery to kill both agents' process groups")
    async with served.client() as client:
        turn = await ended(client, busy, sent["turn"]["id"])
        assert (turn["status"], turn["error"]) == ("FAILED", "interrupted")
        assert pid_of(await run_turn(client, busy, "/whoami")) not in (busy_pid, idle_pid)


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


async def pending(client: Client, session: str) -> dict[str, Any]:
    async def check() -> dict[str, Any] | None:
        data: dict[str, Any] = (await client.data(TURN_APPROVAL, s=session))["session"]
        return data if data["pendingApproval"] else None

    found: dict[str, Any] = await poll(check, "a pending approval", timeout=60)
    return found


class _Ws:
    def __init__(self, client: Client) -> None:
        self.ws_url = client.ws_url


async def test_a6_approval_holds_the_queue_and_is_answered_exactly_once(
    served: ProcServer,
) -> None:
    """A6: a permission request is Session.pendingApproval (carried by sessionChanged with a
    new revision), holds the queue (APPROVAL), and of two concurrent answers one wins; the
    answer is kept with the turn and the queued prompt runs after."""
    from cluster.cluster_helpers import Subscriber

    async with served.client() as client:
        session = await ready_session(client)
        sub_query = (
            "subscription($s: ID!) { sessionChanged(sessionId: $s) { revision "
            "pendingApproval { id title } } }"
        )
        async with Subscriber(_Ws(client), sub_query, s=session) as sub:  # type: ignore[arg-type]
            first = (await sub.next())["sessionChanged"]
            assert first["pendingApproval"] is None
            sent = await client.ok(
                "sendMessage", "turn { id }", sessionId=session, content="/permission"
            )
            data = await pending(client, session)
            approval = data["pendingApproval"]
            assert approval["title"] == "Write notes.txt"
            assert approval["toolCallId"] == "call-perm"
            assert approval["options"] == [
                {"id": "allow", "name": "Allow", "kind": "allow_once"},
                {"id": "reject", "name": "Reject", "kind": "reject_once"},
            ]
            assert "APPROVAL" in data["queue"]["heldBy"]
            while True:  # sessionChanged carries it, with a newer revision
                event = (await sub.next())["sessionChanged"]
                if event["pendingApproval"] is not None:
                    assert event["revision"] > first["revision"]
                    assert event["pendingApproval"]["id"] == approval["id"]
                    break
        await client.ok("enqueueMessage", "entry { id }", sessionId=session, content="queued")
        bad = await client.mutate(
            "answerApproval", ANSWER, approvalId=approval["id"], optionId="nope"
        )
        assert bad["userErrors"][0]["code"] == "INVALID_INPUT"
        answers = await asyncio.gather(
            client.mutate("answerApproval", ANSWER, approvalId=approval["id"], optionId="allow"),
            client.mutate("answerApproval", ANSWER, approvalId=approval["id"], optionId="reject"),
        )
        winners = [a for a in answers if not a["userErrors"]]
        losers = [a for a in answers if a["userErrors"]]
        assert len(winners) == 1 and len(losers) == 1
        assert losers[0]["userErrors"][0]["code"] == "APPROVAL_RESOLVED"
        chosen = winners[0]["approval"]["optionId"]
        assert winners[0]["approval"]["outcome"] == "SELECTED"
        turn = await ended(client, session, sent["turn"]["id"])
        assert turn["output"] == f"permission: {chosen}"
        again = await client.mutate(
            "answerApproval", ANSWER, approvalId=approval["id"], optionId="allow"
        )
        assert again["userErrors"][0]["code"] == "APPROVAL_RESOLVED"

        async def queued_ran() -> dict[str, Any] | None:
            data = (await client.data(TURN_APPROVAL, s=session))["session"]
            turn = data["currentTurn"]
            return data if turn["output"] == "echo: queued" else None

        data = await poll(queued_ran, "the queued prompt to run")
        assert data["pendingApproval"] is None
        turns = await client.data(
            "query($s: ID!) { session(id: $s) { turns(last: 5) { prompt approvals { "
            "outcome optionId answeredBy answeredAt } } } }",
            s=session,
        )
        kept = next(t for t in turns["session"]["turns"] if t["prompt"] == "/permission")
        (record,) = kept["approvals"]
        assert record["outcome"] == "SELECTED" and record["optionId"] == chosen
        assert record["answeredBy"] and record["answeredAt"]


async def test_a6_a5_cancel_answers_a_pending_approval_cancelled(served: ProcServer) -> None:
    """A5/A6: cancel answers the pending permission request `cancelled`; the turn ends
    CANCELLED, its approval can no longer be answered, and the queue runs on."""
    async with served.client() as client:
        session = await ready_session(client)
        sent = await client.ok(
            "sendMessage", "turn { id }", sessionId=session, content="/permission"
        )
        approval = (await pending(client, session))["pendingApproval"]
        outcome = await client.ok("cancel", "outcome", sessionId=session)
        assert outcome["outcome"] == "STOPPED"
        turn = await ended(client, session, sent["turn"]["id"])
        assert turn["status"] == "CANCELLED"
        late = await client.mutate(
            "answerApproval", ANSWER, approvalId=approval["id"], optionId="allow"
        )
        assert late["userErrors"][0]["code"] == "APPROVAL_RESOLVED"

        async def released() -> dict[str, Any] | None:
            data = (await client.data(TURN_APPROVAL, s=session))["session"]
            outcomes = [a["outcome"] for a in data["currentTurn"]["approvals"]]
            return data if outcomes == ["CANCELLED"] else None

        data = await poll(released, "the approval to be recorded cancelled")
        assert data["pendingApproval"] is None and "APPROVAL" not in data["queue"]["heldBy"]
        assert (await run_turn(client, session, "next"))["output"] == "echo: next"


async def test_a6_allow_policy_answers_by_itself_and_records_it(served: ProcServer) -> None:
    async with served.client() as client:
        session = await ready_session(client, "allowing")
        sent = await client.ok(
            "sendMessage", "turn { id }", sessionId=session, content="/permission"
        )
        turn = await ended(client, session, sent["turn"]["id"])
        assert turn["output"] == "permission: allow"
        data = (await client.data(TURN_APPROVAL, s=session))["session"]
        (record,) = data["currentTurn"]["approvals"]
        assert record["answeredBy"] == "policy:allow" and record["optionId"] == "allow"


async def test_a6_unknown_and_malformed_approval_ids(served: ProcServer) -> None:
    async with served.client() as client:
        missing = await client.mutate(
            "answerApproval", ANSWER, approvalId=str(uuid.uuid4()), optionId="allow"
        )
        assert missing["userErrors"][0]["code"] == "NOT_FOUND"
        malformed = await client.mutate("answerApproval", ANSWER, approvalId="x", optionId="allow")
        assert malformed["userErrors"][0]["code"] == "INVALID_INPUT"


async def test_a11_an_error_answer_fails_the_turn_and_the_same_agent_takes_the_next_prompt(
    served: ProcServer,
) -> None:
    """A11 through the real server (uvloop): an error answer to session/prompt fails the turn
    with the agent's own code and message, classified (`errorKind`), its stderr in
    `agentStderr` only; the agent process that answered takes the next prompt; the server log
    carries the reason. Before: 'agent process exited (status -9): Error handling request …'
    and a fresh process."""
    async with served.client() as client:
        session = await ready_session(client)
        pid = (await run_turn(client, session, "/whoami"))["output"].split()[0]
        refused = await run_turn(client, session, "/error-auth")
        assert refused["status"] == "FAILED"
        assert refused["error"].startswith(
            "agent error -32000 (authentication): Authentication required"
        )
        assert refused["errorKind"] == "AUTHENTICATION"
        assert "Error handling request" in refused["agentStderr"]
        assert "Error handling request" not in refused["error"]
        assert "status" not in refused["error"]
        internal = await run_turn(client, session, "/error-internal")
        assert internal["error"] == (
            "agent error -32603 (internal): Internal error: the model returned nothing"
        )
        assert internal["errorKind"] == "INTERNAL"
        after = await run_turn(client, session, "/whoami")
        assert after["status"] == "COMPLETED" and after["output"].split()[0] == pid
        assert after["errorKind"] is None and after["agentStderr"] is None
    log = served.log_text()
    assert f"ended FAILED: {refused['error'].splitlines()[0]}" in log
    assert f"ended FAILED: {internal['error']}" in log


AUTH = "{ agents { name auth { state method message methods { id name description envVars } } } }"


async def test_a11_authenticate_before_session_new_and_agents_auth(served: ProcServer) -> None:
    """A11 through the real server: a profile whose env sets an env_var method's variable is
    authenticated before session/new and starts; one without fails its session with the
    agent's refusal naming its methods (its WARNING on stderr in `agentStderr`, not in
    `agentError`); `agents { auth }` shows each state."""
    async with served.client() as client:
        before = {a["name"]: a["auth"] for a in (await client.data(AUTH))["agents"]}
        assert before["keyed"] == {
            "state": "UNKNOWN",
            "method": None,
            "message": None,
            "methods": [],
        }
        assert before["demo"] is None
        keyed = await ready_session(client, "keyed")
        who = (await run_turn(client, keyed, "/whoami"))["output"]
        assert " auth=fake-api-key " in who

        keyless = await client.create_session("keyless")

        async def failed() -> dict[str, Any] | None:
            data: dict[str, Any] = (
                await client.data(
                    "query($s: ID!) { session(id: $s) { state agentError agentStderr } }",
                    s=keyless,
                )
            )["session"]
            return data if data["state"] == "FAILED" else None

        data = await poll(failed, "the keyless session to fail", timeout=60)
        assert data["agentError"].startswith(
            "agent refused session/new: agent error -32000 (authentication): "
            "Authentication required. The agent's authentication methods: fake-login (Log in: "
            "Run `fake login` in a terminal); fake-api-key (Use FAKE_API_KEY: "
        )
        assert "WARNING" not in data["agentError"]
        assert "WARNING: proceeding" in data["agentStderr"]

        after = {a["name"]: a["auth"] for a in (await client.data(AUTH))["agents"]}
        assert after["keyed"]["state"] == "AUTHENTICATED"
        assert after["keyed"]["method"] == "fake-api-key"
        assert after["keyless"]["state"] == "REFUSED"
        assert after["keyless"]["message"] == "Authentication required"
        assert after["keyless"]["methods"] == [
            {
                "id": "fake-login",
                "name": "Log in",
                "description": "Run `fake login` in a terminal",
                "envVars": [],
            },
            {
                "id": "fake-api-key",
                "name": "Use FAKE_API_KEY",
                "description": "Requires setting the `FAKE_API_KEY` environment variable.",
                "envVars": ["FAKE_API_KEY"],
            },
        ]


STEER = "turn { id } queuedEntry { id } outcome"


@pytest.mark.parametrize(("agent", "outcome"), [("steerable", "STEERED"), ("fake", "QUEUED")])
async def test_q16_served_steering_an_acp_turn(
    served: ProcServer, agent: str, outcome: str
) -> None:
    """Q16: an ACP agent with the ``_session/steering`` extension takes a message during its
    prompt (STEERED: the agent answers it in the same turn, a SteerItem records it); one without
    it leaves the message queued at the tail (QUEUED), to run after the turn."""
    async with served.client() as client:
        session = await ready_session(client, agent)
        running = await client.ok("sendMessage", "turn { id }", sessionId=session, content="/slow")

        async def streaming() -> bool:
            turn = (await client.data(TURN, s=session))["session"]["currentTurn"]
            return bool(turn["items"])

        await poll(streaming, "the slow turn to stream")
        answer = await client.ok(
            "sendMessage", STEER, sessionId=session, content="look here", delivery="STEER"
        )
        assert answer["outcome"] == outcome
        if outcome == "STEERED":
            assert answer["turn"]["id"] == running["turn"]["id"]
            assert answer["queuedEntry"] is None

            async def steered() -> dict[str, Any] | None:
                turn: dict[str, Any] = (await client.data(TURN, s=session))["session"][
                    "currentTurn"
                ]
                kinds = [i["kind"] for i in turn["items"]]
                return turn if "STEER" in kinds and "steered: look here" in str(turn) else None

            await poll(steered, "the agent to answer the steered message")
        else:
            assert answer["queuedEntry"] is not None
            data = (await client.data(TURN, s=session))["session"]
            assert data["queue"]["count"] == 1
        # What clients are told before offering Steer: an agent without the method, once it
        # said so, no longer claims steering; one with it does.
        profiles = (await client.data("{ agents { name steering } }"))["agents"]
        assert {"name": agent, "steering": outcome == "STEERED"} in profiles
        await client.ok("cancel", "outcome", sessionId=session)
