"""The example web page with a real agent's turns (SPEC O4, A3, A6), in Debian's Chromium against a
REAL ``turnqueue serve`` whose default profile is the fake ACP agent (``tests/agents``).

The test is the agent: the fake agent's ``/fifo PATH`` prompt relays every line the test writes
to that named pipe (a message chunk, a tool call, a plan, a thought, a permission request) and
ends the turn on ``null``. So the test knows the agent's exact output, and every wait is on a
condition (the page's text, the server's log), never on time.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from frontend_server import REPO, Server, run_server
from web_page import expect, expect_current, needs_browser, shot, wait_ready

#: The first test also pays for building the page and starting the server and the agent.
pytestmark = pytest.mark.timeout(300)

FAKE_ACP = REPO / "tests" / "agents" / "fake_acp_agent.py"
#: Output that breaks naive offsets: astral characters (two UTF-16 units, one code point), a
#: combining accent, CRLF, tabs and trailing spaces.
TRICKY = ["Hello 🌍, ", "e\u0301té\r\n", "\tcode: `x = 1`  \n", "🎉🎉 done?", " …and more 🚀\n"]


@pytest.fixture(scope="module")
def acp_server(web_dist: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    directory = tmp_path_factory.mktemp("web-acp")
    agents = directory / "agents.toml"
    agents.write_text(
        f"""
default = "fake"

[agents.fake]
type = "acp"
command = ["{sys.executable}", "{FAKE_ACP}"]
workspace = "{directory / "work"}"
start_timeout = 30
""",
        encoding="utf-8",
    )
    with run_server(
        directory,
        TURNQUEUE_AGENTS_FILE=str(agents),
        TURNQUEUE_CANCEL_TIMEOUT="3",
        TURNQUEUE_WEB_DIST=str(web_dist),
    ) as server:
        yield server


class Agent:
    """The test's end of the fake agent's ``/fifo``: what is written here is the agent's turn."""

    def __init__(self, path: Path) -> None:
        os.mkfifo(path)
        # Read-write: opening never waits for the agent, and writes wait in the pipe for it.
        self.fd = os.open(path, os.O_RDWR)
        self.prompt = f"/fifo {path}"
        self.said = ""

    def send(self, value: Any) -> None:
        os.write(self.fd, (json.dumps(value) + "\n").encode())

    def say(self, text: str) -> None:
        """One message chunk."""
        self.send(text)
        self.said += text

    def end(self) -> None:
        self.send(None)

    def close(self) -> None:
        os.close(self.fd)


AgentFactory = Callable[[], Agent]


@pytest.fixture
def agents(tmp_path: Path) -> Iterator[AgentFactory]:
    """Make test agents (one per turn), each with its own pipe."""
    made: list[Agent] = []

    def make() -> Agent:
        made.append(Agent(tmp_path / f"agent{len(made)}.fifo"))
        return made[-1]

    yield make
    for each in made:
        each.close()


class Sockets:
    """The page's WebSockets, routed through Playwright: what the page sends is recorded, the
    connection can be dropped, and while ``holding`` every new connection is refused (1013)."""

    def __init__(self, page: Any) -> None:
        self.routes: list[Any] = []
        self.sent: list[dict[str, Any]] = []
        self.holding = False
        page.route_web_socket(re.compile(r"/graphql$"), self._route)

    def _route(self, ws: Any) -> None:
        if self.holding:
            ws.close(code=1013, reason="try again later")
            return
        server = ws.connect_to_server()

        def from_page(message: str | bytes) -> None:
            self.sent.append(json.loads(message))
            server.send(message)

        ws.on_message(from_page)
        self.routes.append(ws)

    def drop(self) -> None:
        self.routes[-1].close(code=1012, reason="service restart")

    def output_subscriptions(self) -> list[dict[str, Any]]:
        """The variables of every turnOutput subscription the page sent, in order."""
        return [
            m["payload"]["variables"]
            for m in self.sent
            if m.get("type") == "subscribe" and "turnOutput(" in m["payload"]["query"]
        ]


def shown(page: Any) -> str:
    text: str = page.evaluate("document.getElementById('output')?.textContent ?? ''")
    return text


def wait_shown(page: Any, text: str) -> None:
    """Until the transcript on screen is exactly ``text`` (byte for byte, no normalising)."""
    page.wait_for_function(
        "(want) => document.getElementById('output')?.textContent === want", arg=text
    )


def open_ready(page: Any, server: Server, session_id: str) -> Any:
    """``page`` on the session, once it is live and the session's agent has started."""
    page.goto(f"{server.base_url}/?session={session_id}")
    wait_ready(page)
    expect(page.locator("#session-state")).to_have_attribute(
        "data-state", "WAITING_FOR_INPUT", timeout=60_000
    )
    return page


def send_from_page(page: Any, prompt: str) -> str:
    """Send ``prompt`` with the page's Send button; the turn's id, once it runs."""
    page.locator("#message").fill(prompt)
    page.locator("#send").click()
    expect_current(page, prompt, "RUNNING")
    turn_id: str = page.locator("#output").get_attribute("data-turn-id")
    return turn_id


# ---- O4: stop is not disconnect ----


@needs_browser
def test_o4_a_dropped_connection_resumes_the_transcript_from_its_offset(
    context: Any, acp_server: Server, agents: AgentFactory
) -> None:
    """O2/O4: the socket drops mid-turn and reconnects are refused while the agent writes on;
    the page then resubscribes with the turn's id and the offset it had (not from 0), and its
    transcript is byte-identical to the turn's output in the server's log, mid-turn and at the
    end (astral characters, combining marks and CRLF included)."""
    agent = agents()
    session_id = acp_server.create_session("dropped connection")
    page = context.new_page()
    sockets = Sockets(page)
    open_ready(page, acp_server, session_id)
    turn_id = acp_server.send(session_id, agent.prompt)["turn"]["id"]
    agent.say(TRICKY[0])
    agent.say(TRICKY[1])
    wait_shown(page, agent.said)
    before = agent.said

    sockets.holding = True
    sockets.drop()
    expect(page.locator("#conn")).to_have_attribute("data-state", "reconnecting")
    agent.say(TRICKY[2])  # while the page is away
    assert acp_server.output(session_id, turn_id, min_chars=len(agent.said))[0] == agent.said
    sockets.holding = False
    expect(page.locator("#conn")).to_have_text("live", timeout=30_000)
    wait_shown(page, agent.said)
    assert sockets.output_subscriptions()[-1] == {
        "sessionId": session_id,
        "turnId": turn_id,
        "afterOffset": len(before),  # code points, as the server counts
    }

    agent.say(TRICKY[3])
    wait_shown(page, agent.said)
    assert shown(page) == acp_server.output(session_id, turn_id, min_chars=len(agent.said))[0]
    agent.say(TRICKY[4])
    agent.end()
    expect_current(page, agent.prompt, "COMPLETED")
    full, status = acp_server.output(session_id, turn_id)
    assert (full, status) == ("".join(TRICKY), "COMPLETED")
    wait_shown(page, full)
    shot(page, "o4-resumed-after-drop")


@needs_browser
def test_o4_a_reloaded_page_shows_what_it_had_and_resumes_after_it(
    context: Any, acp_server: Server, agents: AgentFactory
) -> None:
    """O4: a reload mid-turn keeps the transcript (sessionStorage holds the text with its
    offset) and resumes ``turnOutput`` right after it, also for what the agent wrote while the
    page was gone; the transcript equals the turn's output in the log."""
    agent = agents()
    session_id = acp_server.create_session("reloaded page")
    page = context.new_page()
    sockets = Sockets(page)
    open_ready(page, acp_server, session_id)
    turn_id = acp_server.send(session_id, agent.prompt)["turn"]["id"]
    agent.say(TRICKY[0])
    agent.say(TRICKY[1])
    wait_shown(page, agent.said)
    before = agent.said

    sockets.holding = True  # the reloaded page cannot connect until the agent has written more
    page.reload()
    agent.say(TRICKY[2])
    assert acp_server.output(session_id, turn_id, min_chars=len(agent.said))[0] == agent.said
    sockets.holding = False
    wait_ready(page)
    wait_shown(page, agent.said)
    assert sockets.output_subscriptions()[-1] == {
        "sessionId": session_id,
        "turnId": turn_id,
        "afterOffset": len(before),
    }

    agent.say(TRICKY[3])
    agent.end()
    expect_current(page, agent.prompt, "COMPLETED")
    full, status = acp_server.output(session_id, turn_id)
    assert status == "COMPLETED" and full == agent.said
    wait_shown(page, full)


@needs_browser
def test_o4_closing_the_page_does_not_stop_the_turn_only_cancel_does(
    context: Any, acp_server: Server, agents: AgentFactory
) -> None:
    """O4: a turn sent from a page that is then closed runs on and completes (read from the
    API); in a new page, Cancel is what stops the next turn (CANCELLED, its output kept)."""
    session_id = acp_server.create_session("close and cancel")
    page = open_ready(context.new_page(), acp_server, session_id)
    first = agents()
    first_id = send_from_page(page, first.prompt)
    first.say(TRICKY[0])
    wait_shown(page, first.said)
    page.close()
    first.say(TRICKY[1])
    first.end()
    assert acp_server.output(session_id, first_id) == (first.said, "COMPLETED")

    page = open_ready(context.new_page(), acp_server, session_id)
    second = agents()
    second_id = send_from_page(page, second.prompt)
    second.say(TRICKY[2])
    wait_shown(page, second.said)
    page.locator("#cancel").click()
    expect_current(page, second.prompt, "CANCELLED")
    assert acp_server.output(session_id, second_id) == (second.said, "CANCELLED")
    shot(page, "o4-cancelled")


# ---- A3, A6: a real agent's items and approvals ----

TURN_ITEMS = """query($s: ID!) { session(id: $s) { currentTurn { id status
  items { __typename ... on ToolCallItem { title status } ... on ThoughtItem { text }
          ... on PlanItem { entries { content status } } }
  approvals { outcome optionId answeredBy } } } }"""


def items_of(page: Any) -> Any:
    return page.locator("#items > li")


@needs_browser
def test_a3_tool_calls_plans_and_thoughts_stream_and_survive_a_reload(
    context: Any, acp_server: Server, agents: AgentFactory
) -> None:
    """A3 (O4): the page shows a turn's thought, its tool call (title, status, updated in place)
    and its plan as the agent streams them; after a reload mid-turn it shows them again and
    resumes ``turnItems`` from its log offset, and the later updates still land in place."""
    agent = agents()
    session_id = acp_server.create_session("items")
    page = context.new_page()
    sockets = Sockets(page)
    open_ready(page, acp_server, session_id)
    acp_server.send(session_id, agent.prompt)
    agent.send({"thought": "Looking at the notes first."})
    expect(items_of(page)).to_have_text(["Looking at the notes first."])
    agent.send({"tool": "call-1", "title": "Read notes.txt", "status": "pending"})
    tool = page.locator("#items > li.ToolCallItem")
    expect(tool.locator(".title")).to_have_text("Read notes.txt")
    expect(tool.locator(".status")).to_have_text("pending")
    agent.send({"tool": "call-1", "status": "in_progress"})
    expect(tool).to_have_attribute("data-status", "in_progress")
    agent.send({"plan": [["read the notes", "completed"], ["fix the typo", "pending"]]})
    agent.say("Reading.")
    steps = page.locator("#items > li.PlanItem li")
    expect(steps).to_have_text(["read the notes", "fix the typo"])
    expect(steps.first).to_have_attribute("data-status", "completed")
    expect(steps.last).to_have_attribute("data-status", "pending")
    wait_shown(page, "Reading.")
    expect(items_of(page)).to_have_count(3)  # the message is the transcript, not an item here
    shot(page, "a3-items-streaming")

    page.reload()
    wait_ready(page)
    expect(tool).to_have_attribute("data-status", "in_progress")
    expect(tool.locator(".title")).to_have_text("Read notes.txt")
    resumed = [
        m["payload"]["variables"]
        for m in sockets.sent
        if m.get("type") == "subscribe" and "turnItems(" in m["payload"]["query"]
    ][-1]
    assert resumed["turnId"] and resumed["afterOffset"] > 0, resumed

    agent.send({"tool": "call-1", "status": "completed"})
    expect(tool).to_have_attribute("data-status", "completed")
    expect(tool.locator(".status")).to_have_text("completed")
    agent.end()
    expect_current(page, agent.prompt, "COMPLETED")
    expect(items_of(page)).to_have_count(3)
    turn = acp_server.gql(TURN_ITEMS, s=session_id)["session"]["currentTurn"]
    assert [i for i in turn["items"] if i["__typename"] != "MessageItem"] == [
        {"__typename": "ThoughtItem", "text": "Looking at the notes first."},
        {"__typename": "ToolCallItem", "title": "Read notes.txt", "status": "completed"},
        {
            "__typename": "PlanItem",
            "entries": [
                {"content": "read the notes", "status": "completed"},
                {"content": "fix the typo", "status": "pending"},
            ],
        },
    ]


@needs_browser
def test_a6_a_pending_approval_shows_its_options_as_buttons_that_answer_it(
    context: Any, acp_server: Server, agents: AgentFactory
) -> None:
    """A6: the agent's permission request shows with its options as buttons while the queue is
    held (APPROVAL); clicking one answers it (answerApproval) and the turn goes on with it."""
    agent = agents()
    session_id = acp_server.create_session("approval")
    page = open_ready(context.new_page(), acp_server, session_id)
    acp_server.send(session_id, agent.prompt)
    agent.send("/permission")
    approval = page.locator("#approval")
    expect(approval).to_be_visible()
    expect(approval).to_contain_text("Write notes.txt")
    expect(approval.get_by_role("button")).to_have_text(["Allow", "Reject"])
    expect(page.locator("#held-by [data-hold=APPROVAL]")).to_be_visible()
    shot(page, "a6-approval-pending")

    approval.get_by_role("button", name="Allow").click()
    expect(approval).to_be_hidden()
    wait_shown(page, "permission: allow")
    expect(page.locator("#errors")).to_have_text("")
    agent.end()
    expect_current(page, agent.prompt, "COMPLETED")
    turn = acp_server.gql(TURN_ITEMS, s=session_id)["session"]["currentTurn"]
    assert [(a["outcome"], a["optionId"]) for a in turn["approvals"]] == [("SELECTED", "allow")]
