"""The ``command`` agent in the real server process (SPEC §2 Agents; C4, C8), the way it runs.

Each test starts ``python -m turnqueue serve`` — uvicorn's default loop, which is uvloop — with
``TURNQUEUE_AGENT=command`` and drives it over HTTP and a graphql-transport-ws subscription, on
SQLite and (when ``TURNQUEUE_TEST_DATABASE_URL`` is set) PostgreSQL. In-process tests of the agent
(test_command_agent.py) cannot see what only the served process does: until issue 12 every turn
here ended ``FAILED`` with ``agent error:`` because uvloop's subprocess transport is no
``asyncio.SubprocessTransport``.

The server runs ``fake_agent.py prompt``: the message's words pick the fake's mode, so one command
line gives each test the behaviour it needs (see fake_agent.py).
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from clients import WAIT, poll
from cluster_helpers import Server, Subscriber

FAKE = Path(__file__).with_name("fake_agent.py")
PROMPT_COMMAND = shlex.join([sys.executable, "-u", str(FAKE), "prompt"])

TURN_OUTPUT = """subscription($s: ID!) { turnOutput(sessionId: $s) {
  turnId offset text done status } }"""
CURRENT_TURN = """query($s: ID!) { session(id: $s) { state cancellationPending
  currentTurn { id status error agentStderr output } } }"""

Serve = Callable[..., Awaitable[Server]]

#: The ladder's steps for these tests (seconds). The fake prints from its handler as soon as a
#: trapped signal arrives; a step only has to outlast that (and a turn end's commit), so these are
#: short but leave a loaded CI machine ample room. The outcome never depends on them being exact.
STEP = "2.0"


@pytest.fixture
async def serve(database_url: str, tmp_path: Path) -> AsyncIterator[Serve]:
    """Start a real server with the ``command`` agent; after the test it is stopped and its log
    must hold no traceback (issue 12: every turn logged an AssertionError from the agent)."""
    logs: list[Path] = []
    started: list[Server] = []

    async def start(command: str = PROMPT_COMMAND, **env: str) -> Server:
        logs.append(tmp_path / f"server{len(logs)}.log")
        server = Server(
            database_url,
            logs[-1],
            TURNQUEUE_AGENT="command",
            TURNQUEUE_AGENT_COMMAND=command,
            **env,
        )
        started.append(server)
        return await server.start()

    yield start
    for server in started:
        server.stop()
    for log in logs:
        text = log.read_text(errors="replace")
        assert "Traceback" not in text, text[-3000:]


async def send(server: Server, session_id: str, content: str) -> str:
    payload = await server.mutate(
        "sendMessage", "turn { id }", sessionId=session_id, content=content
    )
    turn_id: str = payload["turn"]["id"]
    return turn_id


async def ended_turn(server: Server, session_id: str, turn_id: str) -> dict[str, Any]:
    """The session's current turn once it is over (the turn runs in the server's process)."""

    async def check() -> dict[str, Any] | None:
        session = (await server.gql(CURRENT_TURN, s=session_id))["session"]
        turn: dict[str, Any] = session["currentTurn"]
        assert turn["id"] == turn_id
        return turn if turn["status"] != "RUNNING" else None

    ended: dict[str, Any] = await poll(check, f"turn {turn_id} to end")
    return ended


async def chunks_until(sub: Subscriber, stop: Callable[[list[dict[str, Any]]], bool]) -> list[Any]:
    chunks: list[dict[str, Any]] = []
    while not stop(chunks):
        chunks.append((await sub.next(WAIT))["turnOutput"])
    return chunks


def runs_uvloop(pid: int) -> bool:
    """Whether process ``pid`` has loaded uvloop (as uvicorn's default ``loop="auto"`` does)."""
    return "uvloop" in Path(f"/proc/{pid}/maps").read_text()


def text_of(chunks: list[dict[str, Any]]) -> str:
    return "".join(c["text"] for c in chunks)


async def test_s2_served_command_agent_runs_the_issue_reproduction(serve: Serve) -> None:
    """SPEC §2: the prompt goes to stdin (then closed), the lines printed are the output, status 0
    completes. Issue 12 §1.1's own reproduction: ``sh -c 'cat; echo done'`` under ``serve``."""
    server = await serve("sh -c 'cat; echo; echo done'")
    assert server.process is not None
    assert runs_uvloop(server.process.pid)  # the premise of this module
    sid = await server.create_session()
    turn_id = await send(server, sid, "hello")
    turn = await ended_turn(server, sid, turn_id)
    assert turn == {
        "id": turn_id,
        "status": "COMPLETED",
        "error": None,
        "agentStderr": None,
        "output": "hello\ndone\n",
    }


async def test_s2_served_lines_stream_live_to_a_subscriber_and_exit_0_completes(
    serve: Serve, tmp_path: Path
) -> None:
    """SPEC §2: each line the process prints is streamed as output while it runs (O2: once, in
    order, contiguous offsets); exit status 0 completes the turn."""
    server = await serve()
    sid = await server.create_session()
    gate = tmp_path / "gate"
    turn_id = await send(server, sid, f"gate {gate}")
    async with Subscriber(server, TURN_OUTPUT, s=sid) as sub:
        # The first line arrives (snapshot or live): the subscription listens. Only then may the
        # process go on, so lines 2 and 3 can only reach us live, from the running process.
        before = await chunks_until(sub, lambda cs: "line 1\n" in text_of(cs))
        gate.touch()
        after = await chunks_until(sub, lambda cs: bool(cs) and cs[-1]["done"])
    chunks = before + after
    assert {c["turnId"] for c in chunks} == {turn_id}
    assert text_of(chunks) == "line 1\nline 2\nline 3\n"
    assert [c["offset"] for c in chunks] == [
        sum(len(c["text"]) for c in chunks[:i]) for i in range(len(chunks))
    ]
    # Lines 2 and 3 arrive live, still RUNNING (whole lines: the output log may write lines
    # that come within one flush as one chunk, O1); then the end, COMPLETED.
    live = [c for c in after if not c["done"]]
    assert "".join(c["text"] for c in live) == "line 2\nline 3\n"
    assert all(c["text"].endswith("\n") for c in live)
    assert {c["status"] for c in live} == {"RUNNING"}
    assert after[-1]["status"] == "COMPLETED"
    turn = await ended_turn(server, sid, turn_id)
    assert turn["status"] == "COMPLETED" and turn["error"] is None
    assert turn["output"] == "line 1\nline 2\nline 3\n"


async def test_s2_a11_served_nonzero_exit_fails_with_the_status_and_stderr_apart(
    serve: Serve,
) -> None:
    """SPEC §2: any exit status but 0 fails the turn; the error says which; A11: the tail of
    stderr is `agentStderr`, not part of the error."""
    server = await serve()
    sid = await server.create_session()
    turn_id = await send(server, sid, "fail 3")
    turn = await ended_turn(server, sid, turn_id)
    assert turn["status"] == "FAILED"
    assert turn["error"] == "exit status 3"
    assert turn["agentStderr"].endswith("final words")


async def cancel_when_ready(server: Server, sid: str) -> tuple[str, list[dict[str, Any]]]:
    """Cancel once the process has installed its handlers (it printed ``ready``); the cancel's
    outcome and the rest of the turn's output as the subscriber saw it."""
    async with Subscriber(server, TURN_OUTPUT, s=sid) as sub:
        await chunks_until(sub, lambda cs: "ready\n" in text_of(cs))
        payload = await server.mutate("cancel", "outcome cancellation { pending }", sessionId=sid)
        rest = await chunks_until(sub, lambda cs: bool(cs) and cs[-1]["done"])
    assert payload["cancellation"]["pending"] is False  # C5: cleared by the time it answers
    outcome: str = payload["outcome"]
    return outcome, rest


async def test_s2_c8_served_cancel_sigint_stops_a_process_that_obeys_it(serve: Serve) -> None:
    """SPEC §2 cancel: SIGINT to the group first; a process that dies of it is STOPPED, and the
    turn is CANCELLED (C8) with the signal in its error."""
    server = await serve()  # default cancel timeout (10 s): SIGINT alone must do it
    sid = await server.create_session()
    turn_id = await send(server, sid, "hang")
    outcome, rest = await cancel_when_ready(server, sid)
    assert outcome == "STOPPED"
    assert rest[-1]["status"] == "CANCELLED"
    turn = await ended_turn(server, sid, turn_id)
    assert turn["status"] == "CANCELLED"
    assert turn["error"] == "interrupted (SIGINT): killed by SIGINT"
    state = (await server.gql(CURRENT_TURN, s=sid))["session"]
    assert state["cancellationPending"] is False


async def test_s2_c4_served_cancel_escalates_to_sigterm_when_sigint_is_trapped(
    serve: Serve,
) -> None:
    """SPEC §2 cancel: SIGINT, then SIGTERM after the cancel timeout (C4: bounded). A process that
    traps SIGINT gets it (it says so) and dies of the SIGTERM: ESCALATED, CANCELLED."""
    server = await serve(TURNQUEUE_CANCEL_TIMEOUT=STEP, TURNQUEUE_ESCALATION_TIMEOUT="5.0")
    sid = await server.create_session()
    turn_id = await send(server, sid, "ignore-int")
    outcome, rest = await cancel_when_ready(server, sid)
    assert outcome == "ESCALATED"
    assert text_of(rest) == "ignored SIGINT\n"
    assert rest[-1]["status"] == "CANCELLED"
    turn = await ended_turn(server, sid, turn_id)
    assert turn["status"] == "CANCELLED"
    assert turn["error"] == "interrupted (SIGINT, SIGTERM): killed by SIGTERM"


async def test_s2_c4_served_cancel_ends_in_sigkill_when_sigint_and_sigterm_are_trapped(
    serve: Serve,
) -> None:
    """SPEC §2 cancel: SIGINT, SIGTERM after the cancel timeout, SIGKILL after the escalation
    timeout. A process that traps both receives both (it says so) and only SIGKILL stops it."""
    server = await serve(TURNQUEUE_CANCEL_TIMEOUT=STEP, TURNQUEUE_ESCALATION_TIMEOUT=STEP)
    sid = await server.create_session()
    turn_id = await send(server, sid, "ignore-int-term")
    outcome, rest = await cancel_when_ready(server, sid)
    assert outcome == "ESCALATED"
    assert text_of(rest) == "ignored SIGINT\nignored SIGTERM\n"
    assert rest[-1]["status"] == "CANCELLED"
    turn = await ended_turn(server, sid, turn_id)
    assert turn["status"] == "CANCELLED"
    assert turn["error"] == "interrupted (SIGINT, SIGTERM, SIGKILL): killed by SIGKILL"
