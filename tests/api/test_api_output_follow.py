"""O2 and O3 for a session-following ``turnOutput`` (no ``turnId``) when its turns run on
other instances (M4, M6): what the fleet test (tests/cluster/test_fleet.py) found.

A following stream starts at the turn current when it reads the log and sends every later turn
from offset 0. Another instance's run-time chunks reach this one over NOTIFY through an outbox,
after the durable notifications of their turn's start and end. So:

- the last chunk of a turn can arrive after a new stream has read the next turn as current: it
  is not part of the stream (sent, it reached a client at an offset of a turn it never started);
- a turn whose owner died before relaying any chunk is known here only by its session events
  (its start, the recovery's end): the stream reads such turns from the log;
- O3: a ``Last-Event-ID`` reconnect of a following stream over SSE goes on following the
  session's turns (it once followed that one turn only, so an ``EventSource`` never saw the next).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from turnqueue.agents.scripted import ScriptedAgent
from turnqueue.bus import Event, EventBus, EventKind
from turnqueue.domain import OutputChunk, TurnStatus
from turnqueue.engine import Engine
from turnqueue.settings import Settings
from turnqueue.store.sql import open_store
from turnqueue.timeouts import within

TURN_OUTPUT = """subscription($s: ID!) { turnOutput(sessionId: $s) {
  turnId offset text done status } }"""
STATE = "query($s: ID!) { session(id: $s) { state currentTurn { id status } } }"


async def _ended(api: Any, sid: str, content: str) -> str:
    """Send ``content`` and wait (bounded) until its turn has ended; its id."""
    sent = await api.mutate("sendMessage", "turn { id }", sessionId=sid, content=content)
    turn_id: str = sent["turn"]["id"]
    for _ in range(400):  # bounded polling of the scripted turn (0.2 s)
        session = (await api.data(STATE, s=sid))["session"]
        if session["currentTurn"]["id"] == turn_id and session["currentTurn"]["status"] != (
            "RUNNING"
        ):
            return turn_id
        await asyncio.sleep(0.01)
    raise AssertionError("the turn did not end")


async def test_o2_m4_a_following_stream_drops_a_late_relayed_chunk_of_an_earlier_turn(
    api: Any,
) -> None:
    """The fleet saw a fresh following stream on a relaying instance send a ``done`` at offset
    28 of a turn it had never sent (its 28 characters were sent before the stream read the log,
    its ``done`` relayed after). Here the late relayed chunk of the earlier turn is published
    on the bus as the cluster's relay publishes it."""
    sid = await api.create_session()
    earlier = await _ended(api, sid, "one")
    current = await _ended(api, sid, "two")
    async with api.ws() as ws:
        stream = ws.subscribe(TURN_OUTPUT, s=sid)
        snapshot = (await stream.next())["turnOutput"]
        assert snapshot["turnId"] == current and snapshot["offset"] == 0 and snapshot["done"]
        late = OutputChunk(sid, earlier, 28, "", True, TurnStatus.COMPLETED)
        api.engine.bus.publish(Event(EventKind.OUTPUT, sid, chunk=late, relayed=True))
        later = await api.mutate("sendMessage", "turn { id }", sessionId=sid, content="three")
        following = (await stream.next())["turnOutput"]
    assert following["turnId"] == later["turn"]["id"], following  # not the earlier turn's end
    assert following["offset"] == 0


class _Unheard:
    """Instance A's store, seen through the seam the cluster sends its run-time notifications
    by (``Store.notify``: the outbox of chunks and cancellation transitions): they are lost, as
    when A dies after a batch of output commits and before its outbox's NOTIFY is sent.
    Durable changes (a turn's start and end) are notified inside their own transactions and
    still go out."""

    def __init__(self, store: Any) -> None:
        self._store = store

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def notify(self, payloads: Any) -> None:
        return None


async def test_o2_m6_a_follower_elsewhere_gets_a_turn_whose_owner_died_before_relaying_it(
    database_url: str, start_api: Any
) -> None:
    """O2 ("…or its owner has died: then the turn's end follows, M6"): a client follows
    session S on instance B (no ``turnId``). Instance A starts a turn of S, logs its first
    chunk and dies before it relays it. B's recovery ends the turn FAILED with what the log
    kept. The client on B must get that output and the turn's end; it got nothing of the turn,
    ever (the fleet's uninterrupted reference client missed such a turn in 3 of 7 runs)."""
    if not database_url.startswith("postgresql"):
        pytest.skip("several instances share a database only on PostgreSQL (M4)")
    b = await start_api(lease_seconds=1.0)
    # A closes without waiting for its orphaned turn (recovered by B) beyond a short bound.
    settings = Settings(database_url=database_url, lease_seconds=1.0, cancel_operation_timeout=1)
    store = await open_store(settings)
    a = await Engine.open(
        settings, _Unheard(store), EventBus(64), agents={"scripted": ScriptedAgent(60.0)}
    )
    try:
        sid = await b.create_session()
        async with b.ws() as ws:
            stream = ws.subscribe(TURN_OUTPUT, s=sid)
            first = asyncio.create_task(stream.next())
            for _ in range(1000):  # bounded: until B's stream listens (no "subscribed" signal)
                if b.engine.bus.subscriber_count():
                    break
                await asyncio.sleep(0.01)
            sent = await a.send_message("alice", sid, "hello")
            assert sent.turn is not None
            for _ in range(1000):  # bounded: until A's first batch is in the log
                chunk = await a.output_since(sid, sent.turn.id, 0)
                if chunk is not None and chunk.text:
                    break
                await asyncio.sleep(0.01)
            # A dies: its heartbeats stop; its turn is B's to recover after a lease.
            a.core.closing = True
            a.core.runners.clear()
            assert a.core.cluster is not None
            await a.core.cluster.aclose()
            for _ in range(1000):  # bounded: until B's recovery has ended the turn (M6)
                session = (await b.data(STATE, s=sid))["session"]
                if session["currentTurn"]["status"] == "FAILED":
                    break
                await asyncio.sleep(0.01)
            else:
                raise AssertionError("B never recovered A's turn")
            message = (await within(first, 10))["turnOutput"]
            assert message["turnId"] == sent.turn.id and message["offset"] == 0
            assert (
                chunk is not None and message["text"] == chunk.text
            )  # what the log kept, then (or with it) the end
    finally:
        await a.aclose()
        await store.close()


@dataclass
class _SseEvent:
    event: str
    data: str
    id: str | None


async def _sse_events(response: httpx.Response) -> AsyncIterator[_SseEvent]:
    """The events of an SSE response (comments skipped), per the EventSource rules."""
    fields: dict[str, str] = {}
    async for line in response.aiter_lines():
        if line == "":
            if "event" in fields or "data" in fields:
                yield _SseEvent(
                    fields.get("event", "message"), fields.get("data", ""), fields.get("id")
                )
            fields = {}
        elif not line.startswith(":"):
            name, _, value = line.partition(":")
            fields[name] = value[1:] if value.startswith(" ") else value


async def _sse(api: Any, sid: str, last_id: str | None, want: str) -> tuple[list[Any], bool]:
    """One EventSource connection to ``turnOutput(sessionId)`` (``Last-Event-ID`` when given):
    its events until the stream ends or a chunk of turn ``want`` arrives (bounded)."""
    headers = {"Accept": "text/event-stream", "Authorization": "Bearer tok-a"}
    if last_id is not None:
        headers["Last-Event-ID"] = last_id
    params = {"query": TURN_OUTPUT, "variables": json.dumps({"s": sid})}
    got: list[Any] = []
    try:
        async with (
            asyncio.timeout(5),
            api.http.stream("GET", api.url, params=params, headers=headers) as response,
        ):
            async for event in _sse_events(response):
                got.append(event)
                if (
                    event.event == "next"
                    and json.loads(event.data)["data"]["turnOutput"]["turnId"] == want
                ):
                    return got, True
    except TimeoutError:
        pass
    return got, False


async def test_o3_an_eventsource_following_a_session_sees_the_next_turn_after_a_reconnect(
    api: Any,
) -> None:
    """O3 ("a browser's EventSource that reconnects with Last-Event-ID resumes without
    loss"): an EventSource follows ``turnOutput(sessionId)`` (no ``turnId``); its connection
    drops during turn one and it reconnects with ``Last-Event-ID``, as it does by itself.
    Today that request follows turn one only and ends (``complete``); an EventSource reconnects
    whenever a stream ends, with the id of turn one's end, gets that end again, and so on: it
    never sees turn two. (The fleet's SSE client subscribes afresh after such an end and catches
    up with ``turnsConnection``; a plain EventSource cannot.)"""
    sid = await api.create_session()
    one = await _ended(api, sid, "one")
    last_id = f"{one}:3"  # dropped after the first 3 characters of turn one
    two = await api.mutate("sendMessage", "turn { id }", sessionId=sid, content="two")
    seen_two = False
    for _ in range(4):  # EventSource reconnects after every end of its stream
        events, seen_two = await _sse(api, sid, last_id, two["turn"]["id"])
        if seen_two:
            break
        last_id = next((e.id for e in reversed(events) if e.id), last_id)
    assert seen_two
