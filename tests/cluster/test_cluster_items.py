"""An ACP turn running on instance A, seen and answered from instance B (A3, A6, O2, M4): two
real ``turnqueue serve`` processes on one PostgreSQL, with the fake ACP agent."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from cluster_helpers import WAIT, Server, Subscriber

FAKE = Path(__file__).resolve().parents[1] / "agents" / "fake_acp_agent.py"

ITEMS_SUB = """subscription($s: ID!, $t: ID, $a: Int) {
  turnItems(sessionId: $s, turnId: $t, afterOffset: $a) {
    turnId offset nextOffset done status
    items { index kind
      ... on MessageItem { text }
      ... on ToolCallItem { toolCallId title status }
      ... on PlanItem { entries { content status } } } } }"""
TURN = """query($s: ID!) { session(id: $s) { state
  pendingApproval { id options { id } }
  currentTurn { id status output
    items { index kind
      ... on MessageItem { text }
      ... on ToolCallItem { toolCallId title status }
      ... on PlanItem { entries { content status } } }
    approvals { outcome optionId answeredBy } } } }"""
ANSWER = """mutation($a: ID!, $o: ID!) { answerApproval(input: {approvalId: $a, optionId: $o}) {
  approval { outcome optionId } userErrors { code } } }"""


@pytest.fixture
async def pair(pg_database_url: str, tmp_path: Path) -> AsyncIterator[tuple[Server, Server]]:
    agents = tmp_path / "agents.toml"
    agents.write_text(
        f"""default = "fake"
[agents.fake]
type = "acp"
command = ["{sys.executable}", "{FAKE}"]
workspace = "{tmp_path / "work"}"
start_timeout = 30
""",
        encoding="utf-8",
    )
    env = {"TURNQUEUE_AGENTS_FILE": str(agents)}
    group = [Server(pg_database_url, tmp_path / f"server{i}.log", **env) for i in range(2)]
    try:
        for server in group:  # one after the other: the first runs the migrations
            await server.start(wait=60)  # each starts an ACP agent profile; a busy machine
        yield group[0], group[1]
    finally:
        for server in group:
            server.stop()


async def _poll(server: Server, sid: str, check: Any, what: str) -> dict[str, Any]:
    for _ in range(int(WAIT * 3 / 0.05)):
        session: dict[str, Any] = (await server.gql(TURN, s=sid))["session"]
        if check(session):
            return session
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


async def _ready(a: Server) -> str:
    sid = await a.create_session()  # its agent starts on A
    await _poll(a, sid, lambda s: s["state"] == "WAITING_FOR_INPUT", "the agent to start")
    return sid


def _ended(session: dict[str, Any]) -> bool:
    turn = session["currentTurn"]
    return turn is not None and turn["status"] != "RUNNING"


async def test_a6_m4_an_approval_answered_on_b_resolves_the_turn_on_a_exactly_once(
    pair: tuple[Server, Server],
) -> None:
    a, b = pair
    sid = await _ready(a)
    await a.mutate("sendMessage", "turn { id }", sessionId=sid, content="/permission")
    asked = await _poll(b, sid, lambda s: s["pendingApproval"], "the approval, seen on B")
    approval = asked["pendingApproval"]["id"]
    answers = await asyncio.gather(
        b.gql(ANSWER, a=approval, o="allow"),
        b.gql(ANSWER, a=approval, o="reject"),
        a.gql(ANSWER, a=approval, o="reject"),
    )
    payloads = [r["answerApproval"] for r in answers]
    won = [p for p in payloads if not p["userErrors"]]
    assert len(won) == 1, payloads
    assert sorted(e["code"] for p in payloads for e in p["userErrors"]) == ["APPROVAL_RESOLVED"] * 2
    option = won[0]["approval"]["optionId"]
    session = await _poll(b, sid, _ended, "the turn to end")
    turn = session["currentTurn"]
    assert turn["output"] == f"permission: {option}"
    assert turn["approvals"] == [{"outcome": "SELECTED", "optionId": option, "answeredBy": "local"}]
    assert session["pendingApproval"] is None


async def test_a3_o2_m4_turn_items_on_b_follow_a_turn_running_on_a(
    pair: tuple[Server, Server],
) -> None:
    """B does not run the turn: its turnItems replays A's log, then the batches A relays
    (their ends only; B reads the log), to the same items as Turn.items on either instance."""
    a, b = pair
    sid = await _ready(a)
    state: dict[int, dict[str, Any]] = {}
    chunks: list[dict[str, Any]] = []
    async with Subscriber(b, ITEMS_SUB, s=sid) as on_b:
        # A first turn, followed to its end, proves the stream on B listens before the turn
        # under test starts (else that turn may be over before B subscribes, and read at once).
        await a.mutate("sendMessage", "turn { id }", sessionId=sid, content="warm up")
        while not (await on_b.next(WAIT * 3))["turnItems"]["done"]:
            pass
        await a.mutate("sendMessage", "turn { id }", sessionId=sid, content="/steps 6 0.05")
        while not (chunks and chunks[-1]["done"]):
            chunks.append((await on_b.next(WAIT * 3))["turnItems"])
    for chunk in chunks:
        for item in chunk["items"]:
            old = state.get(item["index"])
            if old is not None and item["kind"] == "MESSAGE":
                old["text"] += item["text"]
            else:
                state[item["index"]] = dict(item)
    assert [c["offset"] for c in chunks[1:]] == [c["nextOffset"] for c in chunks[:-1]]
    assert chunks[-1]["status"] == "COMPLETED"
    # Live, not only at the end: B heard A's batches while the turn ran.
    assert sum(1 for c in chunks if c["items"] and not c["done"]) >= 2, chunks
    on_a = (await a.gql(TURN, s=sid))["session"]["currentTurn"]
    on_b_items = (await b.gql(TURN, s=sid))["session"]["currentTurn"]["items"]
    assert [state[i] for i in range(len(state))] == on_a["items"] == on_b_items
    calls = [i for i in on_a["items"] if i["kind"] == "TOOL_CALL"]
    assert [c["status"] for c in calls] == ["completed"] * 6
