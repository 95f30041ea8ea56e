"""A reconnect resumes the stream it had (O2, O3, issue 23 finding 2), against a real ``turnqueue
serve`` process (uvloop) on each store: GraphQL over SSE, the reconnect repeating the request
with the ``Last-Event-ID`` of the last event it received, as a browser's ``EventSource`` does.

A stream that follows a session (``turnOutput``/``turnItems`` without ``turnId``) resumed after
its first turn's end must go on with the next turn — not send that end again under an id the
client had, then complete. A snapshot stream resumed at the revision it had must not send that
state again.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from clients import TLS, WAIT, Client, poll
from ops_helpers import ProcServer
from test_output_sse import SseEvent, events, headers, sse_params

from turnqueue.agents.scripted import reply_for
from turnqueue.timeouts import within

TOKEN = "secret-o3"
FOLLOW = """subscription($s: ID!) {
  turnOutput(sessionId: $s) { turnId offset text done status } }"""
ITEMS = """subscription($s: ID!) {
  turnItems(sessionId: $s) { turnId offset nextOffset done status items { index kind } } }"""
QUEUE = "subscription($s: ID!) { queueStatusChanged(sessionId: $s) { revision count } }"
SESSION = """subscription($s: ID!) { sessionChanged(sessionId: $s) {
  revision cancellationRevision state } }"""
CURRENT = "query($s: ID!) { session(id: $s) { state currentTurn { id status } } }"


@pytest.fixture
async def server(database_url: str, tmp_path: Path) -> AsyncIterator[ProcServer]:
    proc = ProcServer(
        database_url,
        tmp_path / "server.log",
        TURNQUEUE_TOKENS=f"alice:{TOKEN}",
        TURNQUEUE_SCRIPTED_TURN_SECONDS="0.6",
    )
    await proc.start()
    try:
        yield proc
    finally:
        proc.stop()


class Sse:
    """One SSE request at a time against the server, read event by event."""

    def __init__(self, http: httpx.AsyncClient, url: str, query: str, **variables: Any) -> None:
        self._http = http
        self._url = url
        self._params = sse_params(query, **variables)
        self._response: httpx.Response | None = None
        self._events: AsyncIterator[SseEvent] | None = None

    async def open(self, last_event_id: str | None = None) -> None:
        extra = {"Last-Event-ID": last_event_id} if last_event_id else {}
        request = self._http.build_request(
            "GET", self._url, params=self._params, headers=headers(TOKEN, **extra)
        )
        self._response = await self._http.send(request, stream=True)
        assert self._response.status_code == 200
        self._events = events(self._response)

    async def next(self) -> SseEvent:
        assert self._events is not None
        return await within(anext(self._events), WAIT)

    async def close(self) -> None:  # the connection drops, as a network failure drops it
        if self._response is not None:
            await self._response.aclose()
        self._response = self._events = None


async def _until_done(sse: Sse, field: str) -> list[SseEvent]:
    """The events up to and including a turn's end (``done``); ``complete`` is a failure."""
    got: list[SseEvent] = []
    for _ in range(200):  # bounded
        event = await sse.next()
        assert event.event == "next", (event, got)
        got.append(event)
        if event.payload["data"][field]["done"]:
            return got
    raise AssertionError(f"no done: {got}")


async def _ended(api: Client, sid: str) -> bool:
    session = (await api.data(CURRENT, s=sid))["session"]
    return bool(session["state"] == "WAITING_FOR_INPUT")


async def _send(api: Client, sid: str, prompt: str) -> str:
    sent = await api.ok("sendMessage", "turn { id }", sessionId=sid, content=prompt)
    turn_id: str = sent["turn"]["id"]
    return turn_id


def _text(chunks: list[dict[str, Any]], turn_id: str) -> str:
    mine = [c for c in chunks if c["turnId"] == turn_id]
    assert [c["offset"] for c in mine] == [
        sum(len(c["text"]) for c in mine[:i]) for i in range(len(mine))
    ], mine  # no gap, no repeat
    return "".join(c["text"] for c in mine)


@pytest.mark.parametrize("at", ["end", "last text"])
async def test_o2_o3_turn_output_following_the_session_resumes_into_the_next_turn(
    server: ProcServer, at: str
) -> None:
    """Issue 23 (2): resumed with the id of turn 1's last event after turn 2 began, the stream
    sent turn 1's ``done`` again (an id the client had), then ``complete``: turn 2 never came.
    ``at``: the client's last event was turn 1's end, or its last text (then the end follows)."""
    async with (
        Client(server.base, TOKEN) as api,
        httpx.AsyncClient(timeout=WAIT, verify=TLS) as http,
    ):
        sid = await api.create_session()
        sse = Sse(http, api.url, FOLLOW, s=sid)
        await sse.open()
        first = await _send(api, sid, "one")
        had = await _until_done(sse, "turnOutput")
        await sse.close()
        if at == "last text":
            had = had[:-1]  # the end was lost with the connection
            assert not had[-1].payload["data"]["turnOutput"]["done"]
        second = await _send(api, sid, "two")  # turn 2 begins while the client is away
        await sse.open(last_event_id=had[-1].id)
        resumed = await _until_done(sse, "turnOutput")
        if resumed[-1].payload["data"]["turnOutput"]["turnId"] == first:
            resumed += await _until_done(sse, "turnOutput")
        third = await _send(api, sid, "three")  # the resumed stream still follows the session
        resumed += await _until_done(sse, "turnOutput")
        await sse.close()
        await poll(lambda: _ended(api, sid), "the last turn to end")
    chunks = [e.payload["data"]["turnOutput"] for e in had + resumed]
    ids = [e.id for e in had + resumed]
    assert len(set(ids)) == len(ids), ids  # nothing sent twice
    assert [c["turnId"] for c in chunks if c["done"]] == [first, second, third]
    for turn_id, prompt in ((first, "one"), (second, "two"), (third, "three")):
        assert _text(chunks, turn_id) == reply_for(prompt)


async def test_o2_o3_turn_items_following_the_session_resumes_into_the_next_turn(
    server: ProcServer,
) -> None:
    """Issue 23 (2), turnItems: the same resume, in log entries."""
    async with (
        Client(server.base, TOKEN) as api,
        httpx.AsyncClient(timeout=WAIT, verify=TLS) as http,
    ):
        sid = await api.create_session()
        sse = Sse(http, api.url, ITEMS, s=sid)
        await sse.open()
        first = await _send(api, sid, "one")
        had = await _until_done(sse, "turnItems")
        await sse.close()
        second = await _send(api, sid, "two")
        await sse.open(last_event_id=had[-1].id)
        resumed = await _until_done(sse, "turnItems")
        await sse.close()
    chunks = [e.payload["data"]["turnItems"] for e in had + resumed]
    ids = [e.id for e in had + resumed]
    assert len(set(ids)) == len(ids), ids
    assert [c["turnId"] for c in chunks if c["done"]] == [first, second]
    second_chunks = [c for c in chunks if c["turnId"] == second]
    assert second_chunks[0]["offset"] == 0  # turn 2 from its beginning
    pairs = itertools.pairwise(second_chunks)
    assert all(a["nextOffset"] == b["offset"] for a, b in pairs)


async def test_o3_a_snapshot_stream_resumed_at_its_revision_sends_only_newer_states(
    server: ProcServer,
) -> None:
    """A reconnect of queueStatusChanged or sessionChanged with the id of the state it had is
    not sent that state again; the next change comes."""
    async with (
        Client(server.base, TOKEN) as api,
        httpx.AsyncClient(timeout=WAIT, verify=TLS) as http,
    ):
        sid = await api.create_session()
        await api.ok("setAutoRun", "queue { revision }", sessionId=sid, autoRun=False)
        queue, session = Sse(http, api.url, QUEUE, s=sid), Sse(http, api.url, SESSION, s=sid)
        await queue.open()
        await session.open()
        had_queue, had_session = await queue.next(), await session.next()
        await queue.close()
        await session.close()
        await queue.open(last_event_id=had_queue.id)
        await session.open(last_event_id=had_session.id)
        await api.ok("enqueueMessage", "entry { id }", sessionId=sid, content="q")  # a queue rev
        await _send(api, sid, "go")  # a session revision (the queue's entry stays queued)
        queue_next, session_next = await queue.next(), await session.next()
        await queue.close()
        await session.close()
    assert int(queue_next.id or 0) > int(had_queue.id or 0), (had_queue, queue_next)
    assert queue_next.payload["data"]["queueStatusChanged"]["count"] == 1
    was = [int(x) for x in (had_session.id or "").split(":")]
    now = [int(x) for x in (session_next.id or "").split(":")]
    assert now != was and now[0] >= was[0] and now[1] >= was[1], (had_session, session_next)
