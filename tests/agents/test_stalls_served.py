"""Stalls end (SPEC A9) and approvals expire (A10) through the real served process
(``python -m turnqueue serve``: uvloop, real sockets), on both stores, against the fake ACP agent
and a ``command`` profile, with bounds set in the agents file."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from clients import poll
from ops.ops_helpers import Client, ProcServer
from test_acp_served import ANSWER, TURN_APPROVAL, ended, process_gone, ready_session, run_turn

FAKE = Path(__file__).with_name("fake_acp_agent.py")
#: A9: the served profile's stall bound (seconds) and its first-activity bound.
STALL = 0.8
START = 5


def agents_file(tmp_path: Path) -> Path:
    command = f'["{sys.executable}", "{FAKE}"]'
    path = tmp_path / "agents.toml"
    path.write_text(
        f"""
default = "stalling"

[agents.stalling]
type = "acp"
command = {command}
workspace = "{tmp_path / "work"}"
start_timeout = {START}
stall_timeout = {STALL}

[agents.expiring]
type = "acp"
command = {command}
workspace = "{tmp_path / "work"}"
start_timeout = 30
approval_timeout = 0.5

[agents.quiet]
type = "command"
command = ["sh", "-c", "echo started; exec sleep 60"]
start_timeout = {START}
stall_timeout = {STALL}
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
        TURNQUEUE_CANCEL_TIMEOUT="5.0",
        TURNQUEUE_ESCALATION_TIMEOUT="1.0",
        TURNQUEUE_LEASE_SECONDS="10",  # one instance, never restarted: no lease expiry wanted
    )
    await server.start()
    try:
        yield server
    finally:
        server.stop()


async def send(client: Client, session: str, prompt: str) -> dict[str, Any]:
    sent: dict[str, Any] = await client.ok(
        "sendMessage", "turn { id } queuedEntry { id }", sessionId=session, content=prompt
    )
    return sent


async def test_a9_served_stalled_turns_fail_stalled_and_the_queue_goes_on(
    served: ProcServer,
) -> None:
    """A9 through the server: a prompt hung after one update and a prompt the agent never acts
    on both end FAILED with errorKind STALLED, their agent killed; the entry queued behind the
    first runs next on a fresh agent, and the session takes the next prompt."""
    async with served.client() as client:
        session = await ready_session(client)
        whoami = await run_turn(client, session, "/whoami")
        pid = int(whoami["output"].split()[0].removeprefix("pid="))
        hung = (await send(client, session, "/hang-after-update"))["turn"]["id"]
        queued = await send(client, session, "next")
        assert queued["turn"] is None and queued["queuedEntry"] is not None
        turn = await ended(client, session, hung)
        assert (turn["status"], turn["errorKind"]) == ("FAILED", "STALLED")
        assert turn["error"] == f"stalled: no agent activity for {STALL:g} s"
        assert turn["output"] == "working on it"
        assert process_gone(pid)

        async def next_ran() -> dict[str, Any] | None:
            turns = (await client.data(TURN_APPROVAL, s=session))["session"]
            current: dict[str, Any] = turns["currentTurn"]
            return current if current["status"] != "RUNNING" and current["id"] != hung else None

        after = await poll(next_ran, "the queued entry to run", timeout=60)
        assert (after["status"], after["output"]) == ("COMPLETED", "echo: next")

        silent = await run_turn(client, session, "/silent")
        assert (silent["status"], silent["errorKind"]) == ("FAILED", "STALLED")
        assert silent["error"] == (
            f"stalled: the agent showed no activity within {START:g} s of the prompt"
        )
        state = await client.data(
            "query($s: ID!) { session(id: $s) { state cancellationPending } }", s=session
        )
        assert state["session"] == {"state": "WAITING_FOR_INPUT", "cancellationPending": False}
        again = await run_turn(client, session, "again")
        assert (again["status"], again["output"]) == ("COMPLETED", "echo: again")


async def test_a9_served_a_command_that_goes_quiet_is_killed_as_stalled(
    served: ProcServer,
) -> None:
    """A9 for a ``command`` profile: a command that prints a line and then nothing is killed
    (its process group) and its turn ends FAILED STALLED with what it printed."""
    async with served.client() as client:
        session = await client.create_session("quiet")
        turn = await run_turn(client, session, "hello")
        assert (turn["status"], turn["errorKind"]) == ("FAILED", "STALLED")
        assert turn["output"] == "started\n"


async def test_a10_served_an_expired_approval_is_answered_reject_by_system(
    served: ProcServer,
) -> None:
    """A10 through the server: the approval's time runs out, it is answered with the agent's
    reject option by ``system`` (recorded with when and which), the queue is released and a
    user's late answer is APPROVAL_RESOLVED."""
    async with served.client() as client:
        session = await ready_session(client, "expiring")
        sent = await send(client, session, "/permission")
        turn = await ended(client, session, sent["turn"]["id"])
        assert (turn["status"], turn["output"]) == ("COMPLETED", "permission: reject")
        data = (await client.data(TURN_APPROVAL, s=session))["session"]
        (record,) = data["currentTurn"]["approvals"]
        assert (record["outcome"], record["optionId"], record["answeredBy"]) == (
            "SELECTED",
            "reject",
            "system",
        )
        assert record["answeredAt"]
        assert data["pendingApproval"] is None and "APPROVAL" not in data["queue"]["heldBy"]
        late = await client.mutate(
            "answerApproval", ANSWER, approvalId=record["id"], optionId="allow"
        )
        assert late["userErrors"][0]["code"] == "APPROVAL_RESOLVED"
