"""turnItems (A3, O2, O3) through the real served process (uvloop), on both stores, with the
fake ACP agent's tool calls and plans: a dropped WebSocket resumed with ``afterOffset``, an SSE
reconnect with ``Last-Event-ID``, and a late reader from 0 all fold to ``Turn.items``."""

from __future__ import annotations

from typing import Any

import httpx
from clients import WAIT
from cluster_helpers import Subscriber
from ops_helpers import ProcServer
from test_acp_served import TURNS, ended, ready_session, served
from test_output_sse import events, headers, sse_params

__all__ = ["served"]  # the fixture, shared with test_acp_served

ITEMS_SUB = """subscription($s: ID!, $t: ID, $a: Int) {
  turnItems(sessionId: $s, turnId: $t, afterOffset: $a) {
    turnId offset nextOffset done status
    items { index kind
      ... on MessageItem { text }
      ... on ThoughtItem { text }
      ... on ToolCallItem { toolCallId title toolKind status text contentJson
                            locations { path line } }
      ... on PlanItem { entries { content priority status } }
      ... on RawItem { json } } } }"""


def apply(state: dict[int, dict[str, Any]], chunk: dict[str, Any]) -> None:
    """A client's fold (TurnItemsChunk): by index, text items append their text."""
    for item in chunk["items"]:
        old = state.get(item["index"])
        if old is not None and item["kind"] in ("MESSAGE", "THOUGHT"):
            old["text"] += item["text"]
        else:
            assert item["index"] <= len(state), (state, item)  # never a hole
            state[item["index"]] = dict(item)


def shown(state: dict[int, dict[str, Any]]) -> list[dict[str, Any]]:
    return [state[i] for i in range(len(state))]


async def until_done(sub: Subscriber, chunks: list[dict[str, Any]]) -> None:
    while not (chunks and chunks[-1]["done"]):
        chunks.append((await sub.next(WAIT * 3))["turnItems"])


async def test_a3_o2_o3_turn_items_resume_over_ws_and_sse_and_fold_to_turn_items(
    served: ProcServer,
) -> None:
    async with served.client() as client, httpx.AsyncClient(timeout=WAIT) as http:
        session = await ready_session(client)
        state: dict[int, dict[str, Any]] = {}
        # 1. WebSocket, subscribed before the prompt (following the session's next turn): a
        # few chunks with items, then the connection drops mid-turn.
        first: list[dict[str, Any]] = []
        async with Subscriber(client, ITEMS_SUB, s=session) as sub:  # type: ignore[arg-type]
            content = "/steps 8 0.15"
            sent = await client.ok("sendMessage", "turn { id }", sessionId=session, content=content)
            turn_id = sent["turn"]["id"]
            while sum(bool(c["items"]) for c in first) < 3 and not (first and first[-1]["done"]):
                first.append((await sub.next(WAIT * 3))["turnItems"])
        assert not first[-1]["done"], "the turn ended before the drop: make it longer"
        assert {c["turnId"] for c in first} == {turn_id}
        for chunk in first:
            apply(state, chunk)
        # 2. Resumed after the last nextOffset, over WebSocket, for part of the rest.
        resumed: list[dict[str, Any]] = []
        after = first[-1]["nextOffset"]
        async with Subscriber(client, ITEMS_SUB, s=session, t=turn_id, a=after) as sub:  # type: ignore[arg-type]
            resumed.append((await sub.next(WAIT * 3))["turnItems"])
        assert resumed[0]["offset"] == after
        for chunk in resumed:
            apply(state, chunk)
        # 3. Then over SSE with Last-Event-ID (what EventSource sends on reconnect).
        last_id = f"{turn_id}:{resumed[-1]['nextOffset']}"
        params = sse_params(ITEMS_SUB, s=session, t=turn_id, a=0)  # the header wins
        sse: list[dict[str, Any]] = []
        ids: list[str | None] = []
        sse_headers = headers(None, **{"Last-Event-ID": last_id})
        async with http.stream("GET", client.url, params=params, headers=sse_headers) as response:
            assert response.status_code == 200
            async for event in events(response):
                if event.event == "complete":
                    break
                assert event.event == "next", event
                sse.append(event.payload["data"]["turnItems"])
                ids.append(event.id)
        assert sse[0]["offset"] == resumed[-1]["nextOffset"]
        # O3: every event's id, the place after it (the turn's end marked as such)
        assert ids == [f"{turn_id}:{c['nextOffset']}" + (":done" * c["done"]) for c in sse]
        for chunk in sse:
            apply(state, chunk)
        every = first + resumed + sse
        assert [c["offset"] for c in every[1:]] == [c["nextOffset"] for c in every[:-1]]
        assert every[-1]["done"] and every[-1]["status"] == "COMPLETED"
        # 4. A late reader from 0 and Turn.items (read from the log) show the same.
        late: list[dict[str, Any]] = []
        async with Subscriber(client, ITEMS_SUB, s=session, t=turn_id) as sub:  # type: ignore[arg-type]
            await until_done(sub, late)
        from_zero: dict[int, dict[str, Any]] = {}
        for chunk in late:
            apply(from_zero, chunk)
        turn = await ended(client, session, turn_id)
        assert shown(state) == shown(from_zero) == turn["items"]
        data = await client.data(TURNS, s=session)
    items = turn["items"]
    calls = [i for i in items if i["kind"] == "TOOL_CALL"]
    assert [c["toolCallId"] for c in calls] == [f"step-{i}" for i in range(8)]
    assert {c["status"] for c in calls} == {"completed"}  # every update applied in place
    plan = [i for i in items if i["kind"] == "PLAN"][-1]
    assert {e["status"] for e in plan["entries"]} == {"completed"}
    text = "".join(i["text"] for i in items if i["kind"] == "MESSAGE")
    assert text == turn["output"] == "".join(f"step {i} " for i in range(8))
    assert data["session"]["turns"][-1]["items"] == items
