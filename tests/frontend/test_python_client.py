"""The terminal client (SPEC U2) against a REAL ``turnqueue serve``: what it prints for a scripted
session, and its merge by revision (R3) as a unit.

The client runs as ``python -m frontend_examples.python_client`` in a subprocess; the tests read
its output line by line until the awaited line appears (never a fixed sleep), then stop it.
"""

from __future__ import annotations

import ast
import io
import queue
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from frontend_server import REPO, Server, ServerFactory

from frontend_examples.python_client import Follower, Revisions
from frontend_examples.python_client.items import TurnItems
from turnqueue.agents.scripted import reply_for

WAIT = 20.0


class ClientProcess:
    """The client's stdout, line by line, with a deadline on every wait."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.process = process
        self.lines: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self._queue.put(line.rstrip("\n"))
        self._queue.put(None)

    def wait_for(self, *predicates: Callable[[str], bool], timeout: float = WAIT) -> list[str]:
        """Read lines until every predicate has matched one of them (in any order)."""
        deadline = time.monotonic() + timeout
        while not all(any(p(line) for line in self.lines) for p in predicates):
            remaining = deadline - time.monotonic()
            try:
                line = self._queue.get(timeout=max(remaining, 0.001))
            except queue.Empty:
                pytest.fail("client never printed the awaited lines:\n" + "\n".join(self.lines))
            if line is None:
                pytest.fail("client exited before the awaited lines:\n" + "\n".join(self.lines))
            self.lines.append(line)
        return self.lines

    def finish(self, timeout: float = WAIT) -> list[str]:
        """Wait for the client to exit by itself; answer everything it printed."""
        self.process.wait(timeout=timeout)
        while (line := self._queue.get(timeout=timeout)) is not None:
            self.lines.append(line)
        return self.lines


@contextmanager
def client(server: Server, session_id: str, *flags: str) -> Iterator[ClientProcess]:
    command = [
        sys.executable,
        "-m",
        "frontend_examples.python_client",
        "--url",
        server.graphql_url,
        "--session",
        session_id,
        *flags,
    ]
    process = subprocess.Popen(
        command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        yield ClientProcess(process)
    finally:
        if process.poll() is None:
            process.terminate()
            process.wait(timeout=10)


def revisions(lines: list[str], kind: str) -> list[int]:
    return [int(m.group(1)) for line in lines if (m := re.match(rf"{kind} rev (\d+):", line))]


def index(lines: list[str], predicate: Callable[[str], bool]) -> int:
    return next(i for i, line in enumerate(lines) if predicate(line))


def test_r3_client_prints_a_scripted_turn_with_increasing_revisions(
    server_factory: ServerFactory,
) -> None:
    """R3: the three snapshots first, then the turn starts and completes, its output streamed;
    session and queue revisions only grow."""
    with server_factory(TURNQUEUE_SCRIPTED_TURN_SECONDS="0.5") as server:
        session_id = server.create_session("python client")
        with client(server, session_id, "--send", "hello") as c:
            lines = c.wait_for(
                lambda line: line.startswith("output done:") and line.endswith("COMPLETED"),
                lambda line: "WAITING_FOR_INPUT" in line and "COMPLETED: 'hello'" in line,
            )
    assert sorted(line.split(" rev ")[0] for line in lines[:3]) == [
        "cancellation",
        "queue",
        "session",
    ], lines
    assert "WAITING_FOR_INPUT" in lines[index(lines, lambda x: x.startswith("session rev"))]
    assert "auto-run on, 0 queued" in lines[index(lines, lambda x: x.startswith("queue rev"))]
    assert index(lines, lambda x: x.startswith("sendMessage: ok")) > 2, lines
    running = index(lines, lambda x: "RUNNING: 'hello'" in x)
    completed = index(lines, lambda x: "COMPLETED: 'hello'" in x)
    assert 2 < running < completed, lines
    output = "".join(
        ast.literal_eval(line.removeprefix("output: "))
        for line in lines
        if line.startswith("output: ")
    )
    assert output == reply_for("hello"), lines
    sessions = revisions(lines, "session")
    queues = revisions(lines, "queue")
    assert sessions == sorted(set(sessions)) and len(sessions) >= 3, lines
    assert queues == sorted(set(queues)) and len(queues) >= 3, lines  # idle, BUSY, idle
    assert not any(line.startswith("stale:") for line in lines), lines


def test_q2_q14_client_auto_run_off_shows_and_is_kept(server_factory: ServerFactory) -> None:
    """Q2/Q14: ``--auto-run off`` answers ok and the queue status shows OFF with reason USER; a
    second client reads it back from its snapshot (Q1: durable)."""
    with server_factory(TURNQUEUE_SCRIPTED_TURN_SECONDS="0.5") as server:
        session_id = server.create_session("auto-run")
        with client(server, session_id, "--auto-run", "off", "--follow-seconds", "0") as c:
            lines = c.finish()
        assert any(line.startswith("setAutoRun: ok") for line in lines), lines
        off = [line for line in lines if "auto-run off (paused: USER)" in line]
        on = [line for line in lines if "auto-run on" in line]
        assert off and on, lines
        assert lines.index(on[0]) < lines.index(off[0]), lines
        with client(server, session_id, "--follow-seconds", "0") as c:
            again = c.finish()
        assert [line for line in again if line.startswith("queue rev")] == [off[0]], again


def test_q5_c1_client_send_now_and_cancel(server_factory: ServerFactory) -> None:
    """Q5: ``--send-now`` runs the chosen entry (the second) first; C1: ``--cancel`` on a stubborn
    turn shows the cancellation pending, then idle with a larger revision."""
    with server_factory(
        TURNQUEUE_SCRIPTED_TURN_SECONDS="0.5", TURNQUEUE_CANCEL_TIMEOUT="1"
    ) as server:
        session_id = server.create_session("send now")
        server.set_auto_run(session_id, False)
        server.enqueue(session_id, "first")
        second = server.enqueue(session_id, "second")
        with client(server, session_id, "--send-now", second) as c:
            lines = c.wait_for(
                lambda line: line.startswith("sendNow: ok"),
                lambda line: "COMPLETED: 'first'" in line,  # the rest follows (auto-run ON)
            )
        assert index(lines, lambda x: "RUNNING: 'second'" in x) < index(
            lines, lambda x: "RUNNING: 'first'" in x
        ), lines

        server.send(session_id, "/stubborn")
        with client(server, session_id, "--cancel") as c:
            lines = c.wait_for(
                lambda line: line.startswith("cancel: ok"),
                lambda line: "CANCELLED: '/stubborn'" in line,
            )
        cancellations = [line for line in lines if line.startswith("cancellation rev")]
        states = [line.rsplit(": ", 1)[1] for line in cancellations]
        assert states == ["idle", "pending", "idle"], lines
        assert revisions(cancellations, "cancellation") == sorted(
            set(revisions(cancellations, "cancellation"))
        ), lines


FAKE_ACP = REPO / "tests" / "agents" / "fake_acp_agent.py"


def test_a3_a6_client_follows_tool_calls_and_plans_and_answers_an_approval(
    server_factory: ServerFactory, tmp_path: Path
) -> None:
    """A3: the client folds turnItems and prints each tool call and the plan as they change;
    A6: ``--answer-approval`` answers the pending approval it shows, and the turn goes on."""
    agents = tmp_path / "agents.toml"
    agents.write_text(
        f'default = "fake"\n[agents.fake]\ntype = "acp"\n'
        f'command = ["{sys.executable}", "{FAKE_ACP}"]\nworkspace = "{tmp_path / "work"}"\n',
        encoding="utf-8",
    )
    with server_factory(TURNQUEUE_AGENTS_FILE=str(agents)) as server:
        session_id = server.create_session("acp")
        with client(server, session_id, "--send", "/steps 2") as c:
            lines = c.wait_for(
                lambda line: line == "item 3 tool call [step-1] Step 1 (execute): completed",
                lambda line: line == "item 0 plan: [x] step 0 | [x] step 1",
                lambda line: "COMPLETED: '/steps 2'" in line,
                timeout=60,
            )
        assert "item 1 tool call [step-0] Step 0 (execute): pending" in lines, lines
        assert "item 0 plan: [>] step 0 | [ ] step 1" in lines, lines
        with client(server, session_id, "--send", "/permission", "--answer-approval", "allow") as c:
            lines = c.wait_for(
                lambda line: line.startswith("approval ") and "allow=Allow (allow_once)" in line,
                lambda line: line.startswith("answerApproval: ok"),
                lambda line: "COMPLETED: '/permission'" in line,
                timeout=60,
            )
        answered = next(line for line in lines if line.startswith("answerApproval:"))
        assert "'approval': 'SELECTED'" in answered and "'option': 'allow'" in answered
        output = "".join(
            ast.literal_eval(line.removeprefix("output: "))
            for line in lines
            if line.startswith("output: ")
        )
        # turnOutput starts with the current (previous, ended) turn, then follows the new one.
        assert output.endswith("permission: allow"), lines


def test_a3_turn_items_fold_by_index_and_text_items_append() -> None:
    items = TurnItems()
    tool = {"index": 0, "kind": "TOOL_CALL", "toolCallId": "c", "title": "t", "status": "pending"}
    items.apply(
        {
            "turnId": "t1",
            "nextOffset": 2,
            "items": [tool, {"index": 1, "kind": "MESSAGE", "text": "a"}],
        }
    )
    changed = items.apply(
        {
            "turnId": "t1",
            "nextOffset": 4,
            "items": [
                {"index": 1, "kind": "MESSAGE", "text": "b"},
                {**tool, "status": "completed"},
            ],
        }
    )
    assert [i["index"] for i in changed] == [0, 1]
    assert items.shown("t1") == [
        {**tool, "status": "completed"},
        {"index": 1, "kind": "MESSAGE", "text": "ab"},
    ]
    assert items.resume_at == {"t1": 4}  # afterOffset for a reconnect


def test_r3_follower_drops_stale_and_ignores_equal_revisions() -> None:
    """R3: per session and kind the highest revision wins; lower is dropped (and said so), equal
    is the same state (silent); kinds are independent."""
    out = io.StringIO()
    follower = Follower("s1", out)
    queue_at = {
        "revision": 7,
        "autoRun": False,
        "pauseReason": "USER",
        "heldBy": ["BUSY"],
        "count": 1,
        "entries": [{"id": "e1234567890", "content": "next"}],
    }
    assert follower.offer("queue", queue_at)
    assert not follower.offer("queue", {**queue_at, "revision": 5, "autoRun": True})
    assert not follower.offer("queue", {**queue_at})
    assert follower.offer("cancellation", {"revision": 2, "pending": True})
    assert follower.offer("queue", {**queue_at, "revision": 8, "autoRun": True, "heldBy": []})
    assert out.getvalue().splitlines() == [
        "queue rev 7: auto-run off (paused: USER), held by BUSY, 1 queued: [e1234567] 'next'",
        "stale: queue rev 5 < 7 dropped",
        "cancellation rev 2: pending",
        "queue rev 8: auto-run on, 1 queued: [e1234567] 'next'",
    ]


def test_r3_revisions_are_per_session_and_kind() -> None:
    revs = Revisions()
    assert revs.accept("a", "queue", 3)
    assert revs.accept("b", "queue", 1)
    assert revs.accept("a", "session", 1)
    assert not revs.accept("a", "queue", 3)
    assert not revs.accept("a", "queue", 2)
    assert revs.accept("a", "queue", 2**53 - 1)
