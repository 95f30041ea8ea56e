"""GraphQL over SSE against a real ``turnqueue serve`` process (O3), with resume (O2).

The client is httpx streaming the response of a plain ``GET /graphql?query=…`` with
``Accept: text/event-stream`` — what a browser's ``EventSource`` sends — and, to reconnect,
the same request with ``Last-Event-ID``.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from clients import TLS, WAIT, Client, poll
from ops_helpers import ProcServer

from turnqueue.agents.scripted import reply_for

TOKEN = "secret-o3"
OUTPUT_SUB = """subscription($s: ID!, $t: ID, $a: Int) {
  turnOutput(sessionId: $s, turnId: $t, afterOffset: $a) { turnId offset text done status } }"""
QUEUE_SUB = "subscription($s: ID!) { queueStatusChanged(sessionId: $s) { revision } }"
PROMPT = "resume me " * 50


@dataclass
class SseEvent:
    event: str
    data: str
    id: str | None

    @property
    def payload(self) -> dict[str, Any]:
        value: dict[str, Any] = json.loads(self.data)
        return value


async def events(response: httpx.Response) -> AsyncIterator[SseEvent]:
    """The SSE events of a streaming response (comments skipped), per the EventSource rules."""
    fields: dict[str, str] = {}
    async for line in response.aiter_lines():
        if line == "":
            if "event" in fields or "data" in fields:
                yield SseEvent(
                    fields.get("event", "message"), fields.get("data", ""), fields.get("id")
                )
            fields = {}
        elif not line.startswith(":"):
            name, _, value = line.partition(":")
            fields[name] = value[1:] if value.startswith(" ") else value


def sse_params(query: str, **variables: Any) -> dict[str, str]:
    return {"query": query, "variables": json.dumps(variables)}


def headers(token: str | None = TOKEN, **extra: str) -> dict[str, str]:
    out = {"Accept": "text/event-stream", **extra}
    if token:
        out["Authorization"] = f"Bearer {token}"
    return out


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[ProcServer]:
    # The scripted agent streams its reply in 5 chunks over the turn's seconds.
    proc = ProcServer(
        f"sqlite:///{tmp_path / 'sse.db'}",
        tmp_path / "server.log",
        TURNQUEUE_TOKENS=f"alice:{TOKEN}",
        TURNQUEUE_SCRIPTED_TURN_SECONDS="1.5",
    )
    await proc.start()
    try:
        yield proc
    finally:
        proc.stop()


async def test_o3_sse_output_has_ids_and_a_last_event_id_reconnect_resumes_exactly(
    server: ProcServer,
) -> None:
    async with (
        Client(server.base, TOKEN) as api,
        httpx.AsyncClient(timeout=WAIT, verify=TLS) as http,
    ):
        sid = await api.create_session()
        sent = await api.ok("sendMessage", "turn { id }", sessionId=sid, content=PROMPT)
        turn_id = sent["turn"]["id"]
        params = sse_params(OUTPUT_SUB, s=sid)
        received: list[SseEvent] = []
        # First connection: a few events, then the connection drops (closed by the client).
        async with http.stream("GET", api.url, params=params, headers=headers()) as response:
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("text/event-stream")
            async for event in events(response):
                received.append(event)
                if len(received) == 2:  # the snapshot and one live chunk
                    break
        last_id = received[-1].id
        assert last_id is not None
        # The reconnect: the same request plus Last-Event-ID, as EventSource sends it.
        async with http.stream(
            "GET", api.url, params=params, headers=headers(**{"Last-Event-ID": last_id})
        ) as response:
            assert response.status_code == 200
            async for event in events(response):
                received.append(event)
                if event.event != "next" or json.loads(event.data)["data"]["turnOutput"]["done"]:
                    break  # the stream follows the session (no turnId): it goes on after the end
        turn = await api.data(
            "query($s: ID!) { session(id: $s) { currentTurn { id output status } } }", s=sid
        )
    nexts = [e for e in received if e.event == "next"]
    chunks = [e.payload["data"]["turnOutput"] for e in nexts]
    assert received[-1].event == "next"
    assert all("errors" not in e.payload for e in nexts)
    # Every event has an id: where a reconnect resumes from (the end is marked as such).
    assert [e.id for e in nexts] == [
        f"{c['turnId']}:{c['offset'] + len(c['text'])}" + (":done" if c["done"] else "")
        for c in chunks
    ]
    text = "".join(c["text"] for c in chunks)
    output = turn["session"]["currentTurn"]["output"]
    assert text == output == reply_for(PROMPT)
    assert [c["offset"] for c in chunks] == [
        sum(len(c["text"]) for c in chunks[:i]) for i in range(len(chunks))
    ]
    assert {c["turnId"] for c in chunks} == {turn_id}
    assert chunks[-1]["done"] is True and chunks[-1]["status"] == "COMPLETED"


async def test_o3_sse_snapshots_carry_their_revision_as_id(server: ProcServer) -> None:
    async with (
        Client(server.base, TOKEN) as api,
        httpx.AsyncClient(timeout=WAIT, verify=TLS) as http,
    ):
        sid = await api.create_session()
        await api.ok("setAutoRun", "queue { revision }", sessionId=sid, autoRun=False)
        params = sse_params(QUEUE_SUB, s=sid)
        async with http.stream("GET", api.url, params=params, headers=headers()) as response:
            stream = events(response)
            first = await anext(stream)
            await api.ok("enqueueMessage", "entry { id }", sessionId=sid, content="q")
            second = await anext(stream)
    for event in (first, second):
        assert event.event == "next"
        assert event.id == str(event.payload["data"]["queueStatusChanged"]["revision"])
    assert int(second.id or 0) > int(first.id or 0)


async def test_o3_s1_s4_sse_needs_the_token_and_an_allowed_origin(server: ProcServer) -> None:
    async with (
        Client(server.base, TOKEN) as api,
        httpx.AsyncClient(timeout=WAIT, verify=TLS) as http,
    ):
        sid = await api.create_session()
        params = sse_params(QUEUE_SUB, s=sid)
        anonymous = await http.get(api.url, params=params, headers=headers(token=None))
        wrong = await http.get(api.url, params=params, headers=headers(token="nope"))
        foreign = await http.get(
            api.url, params=params, headers=headers(Origin="http://evil.example")
        )
        # A turn of another session, and a Last-Event-ID that is no turnOutput id.
        other = await api.create_session()
        sent = await api.ok("sendMessage", "turn { id }", sessionId=other, content="go")
        bad: list[dict[str, Any]] = []
        for variables, extra in (
            ({"s": sid, "t": sent["turn"]["id"]}, {}),
            ({"s": sid}, {"Last-Event-ID": "garbage"}),
            ({"s": sid, "a": -1}, {}),
        ):
            async with http.stream(
                "GET", api.url, params=sse_params(OUTPUT_SUB, **variables), headers=headers(**extra)
            ) as response:
                async for event in events(response):
                    bad.append({"event": event.event, **json.loads(event.data or "{}")})
                    if event.event == "complete":
                        break
        await poll(lambda: _ended(api, other), "the other turn to end")
    assert anonymous.status_code == wrong.status_code == 401
    assert anonymous.json()["errors"][0]["extensions"]["code"] == "UNAUTHENTICATED"
    assert foreign.status_code == 403
    codes = [e["errors"][0]["extensions"]["code"] for e in bad if e["event"] == "next"]
    assert codes == ["NOT_FOUND", "INVALID_INPUT", "INVALID_INPUT"]


async def _ended(api: Client, sid: str) -> bool:
    data = await api.data("query($s: ID!) { session(id: $s) { currentTurn { status } } }", s=sid)
    return bool(data["session"]["currentTurn"]["status"] != "RUNNING")
