"""Subscriptions over graphql-transport-ws against the real server.

R3: snapshot first, then strictly newer revisions; a lagging subscriber is told to resubscribe.
C6: the cancellation pair (pending true, then false) reaches a second client, in Session too.
Q2: an auto-run change made on one connection is seen live on another.
"""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import replace
from typing import Any

import pytest
from gql.transport.exceptions import TransportQueryError

from turnqueue.bus import Event, EventKind
from turnqueue.timeouts import within

SESSION_CHANGED = """subscription($s: ID!) { sessionChanged(sessionId: $s) {
  id state revision cancellationPending cancellationRevision cancellation { pending revision }
  queue { count } currentTurn { status } } }"""
QUEUE_CHANGED = """subscription($s: ID!) { queueStatusChanged(sessionId: $s) {
  id sessionId revision autoRun pauseReason heldBy count entries { content } } }"""
CANCELLATION_CHANGED = """subscription($s: ID!) { cancellationChanged(sessionId: $s) {
  id sessionId pending revision } }"""
TURN_OUTPUT = """subscription($s: ID!) { turnOutput(sessionId: $s) {
  sessionId turnId offset text done status } }"""


async def first_message_when_listening(api: Any, stream: Any) -> asyncio.Task[Any]:
    """Start awaiting a stream with no snapshot yet; return once the server listens on the bus."""
    first = asyncio.create_task(stream.next())

    async def subscribed() -> None:
        # The bus offers no "subscribed" signal; poll it (bounded by the wait_for below).
        while api.engine.bus.subscriber_count() == 0:  # noqa: ASYNC110
            await asyncio.sleep(0.01)

    await within(subscribed(), 10)
    return first


def strictly_increasing(values: list[int]) -> bool:
    return all(a < b for a, b in itertools.pairwise(values))


async def test_r3_session_changed_snapshot_first_then_increasing_revisions(api: Any) -> None:
    sid = await api.create_session()
    async with api.ws() as ws:
        stream = ws.subscribe(SESSION_CHANGED, s=sid)
        snapshot = (await stream.next())["sessionChanged"]
        assert snapshot["id"] == sid and snapshot["state"] == "WAITING_FOR_INPUT"
        assert snapshot["cancellationPending"] is False  # C6: false and its revision included
        assert snapshot["cancellationRevision"] == snapshot["cancellation"]["revision"]
        await api.mutate("sendMessage", "turn { id }", sessionId=sid, content="hello")
        seen = [snapshot] + [
            m["sessionChanged"]
            for m in await stream.until(
                lambda m: (
                    m["sessionChanged"]["state"] != "RUNNING"
                    and m["sessionChanged"]["revision"] > snapshot["revision"]
                )
            )
        ]
    assert "RUNNING" in [s["state"] for s in seen]
    assert strictly_increasing([s["revision"] for s in seen])
    assert seen[-1]["state"] == "WAITING_FOR_INPUT"
    # Each event is read afresh (no DataLoader cache kept from the snapshot or an earlier event).
    assert seen[0]["currentTurn"] is None and seen[-1]["currentTurn"] == {"status": "COMPLETED"}


async def test_r3_queue_status_snapshot_first_with_its_own_id(api: Any) -> None:
    sid = await api.create_session(agent="slow")
    async with api.ws() as ws:
        stream = ws.subscribe(QUEUE_CHANGED, s=sid)
        snapshot = (await stream.next())["queueStatusChanged"]
        assert snapshot["id"] == f"queue:{sid}" and snapshot["sessionId"] == sid
        assert snapshot["count"] == 0 and snapshot["heldBy"] == []
        await api.mutate("sendMessage", "turn { id }", sessionId=sid, content="busy")
        await api.mutate("sendMessage", "queuedEntry { id }", sessionId=sid, content="queued")
        seen = await stream.until(lambda m: m["queueStatusChanged"]["count"] == 1)
    revisions = [snapshot["revision"]] + [m["queueStatusChanged"]["revision"] for m in seen]
    assert strictly_increasing(revisions)
    assert seen[-1]["queueStatusChanged"]["entries"] == [{"content": "queued"}]


async def test_c6_second_client_sees_cancellation_pair_while_first_cancels(api: Any) -> None:
    sid = await api.create_session(agent="slow")
    await api.mutate("sendMessage", "turn { id }", sessionId=sid, content="long work")
    async with api.ws() as watcher:
        cancellations = watcher.subscribe(CANCELLATION_CHANGED, s=sid)
        sessions = watcher.subscribe(SESSION_CHANGED, s=sid)
        first = (await cancellations.next())["cancellationChanged"]
        assert first == {
            "id": f"cancellation:{sid}",
            "sessionId": sid,
            "pending": False,
            "revision": first["revision"],
        }
        session_snapshot = (await sessions.next())["sessionChanged"]
        assert session_snapshot["state"] == "RUNNING"

        outcome = await api.mutate("cancel", "outcome", sessionId=sid)  # the first client (HTTP)
        assert outcome["outcome"] == "STOPPED"

        pending = (await cancellations.next())["cancellationChanged"]
        cleared = (await cancellations.next())["cancellationChanged"]
        assert (pending["pending"], cleared["pending"]) == (True, False)
        assert first["revision"] < pending["revision"] < cleared["revision"]

        seen = await sessions.until(
            lambda m: (
                m["sessionChanged"]["cancellationRevision"] == cleared["revision"]
                and m["sessionChanged"]["state"] == "WAITING_FOR_INPUT"
            )
        )
    flags = [m["sessionChanged"]["cancellationPending"] for m in seen]
    assert True in flags and flags[-1] is False  # C6: Session carries the pair too
    for m in seen:  # one snapshot: flag and revision agree (C2)
        s = m["sessionChanged"]
        assert s["cancellation"] == {
            "pending": s["cancellationPending"],
            "revision": s["cancellationRevision"],
        }


async def test_q2_auto_run_change_on_one_connection_seen_live_on_another(api: Any) -> None:
    sid = await api.create_session()
    async with api.ws() as watcher, api.ws() as actor:
        stream = watcher.subscribe(QUEUE_CHANGED, s=sid)
        before = (await stream.next())["queueStatusChanged"]
        assert before["autoRun"] is True
        result = await actor.execute(
            "mutation($s: ID!) { setAutoRun(input: {sessionId: $s, autoRun: false}) "
            "{ queue { revision } userErrors { code } } }",
            s=sid,
        )
        assert result["setAutoRun"]["userErrors"] == []
        after = (await stream.next())["queueStatusChanged"]
    assert after["autoRun"] is False and after["pauseReason"] == "USER"
    assert after["revision"] == result["setAutoRun"]["queue"]["revision"] > before["revision"]


async def test_r3_reconnect_gets_a_fresh_snapshot(api: Any) -> None:
    sid = await api.create_session(agent="slow")
    async with api.ws() as ws:
        old = (await ws.subscribe(QUEUE_CHANGED, s=sid).next())["queueStatusChanged"]
    await api.mutate("setAutoRun", "dispatched", sessionId=sid, autoRun=False)
    await api.mutate("enqueueMessage", "entry { id }", sessionId=sid, content="while away")
    async with api.ws() as ws:
        fresh = (await ws.subscribe(QUEUE_CHANGED, s=sid).next())["queueStatusChanged"]
    assert fresh["revision"] > old["revision"]
    assert fresh["entries"] == [{"content": "while away"}] and fresh["autoRun"] is False


@pytest.mark.parametrize("subscription", [QUEUE_CHANGED, SESSION_CHANGED, TURN_OUTPUT])
async def test_r3_lagging_subscriber_gets_resync_error(start_api: Any, subscription: str) -> None:
    """Strawberry's own execution: a stream's buffer overflows. (A shared group sends what it
    can at once and resyncs a member whose socket stays full: tests/api/test_api_fanout.py.)"""
    api = await start_api(subscriber_buffer=2, subscription_fanout=False)
    sid = await api.create_session()
    async with api.ws() as ws:
        stream = ws.subscribe(subscription, s=sid)
        if "turnOutput" in subscription:  # no snapshot before the first turn
            pending = await first_message_when_listening(api, stream)
        else:
            await stream.next()  # the snapshot
            pending = asyncio.create_task(stream.next())
        status = await api.engine.queue_status(sid)
        for revision in range(1000, 1010):  # a burst, with no await in between: it lags
            # Each a new state: a queue event carries its status (a snapshot stream coalesces
            # events that announce the same read, and skips states a newer one replaces).
            carried = replace(status, revision=revision)
            api.engine.bus.publish(Event(EventKind.QUEUE, sid, revision, queue=carried))
            for kind in (EventKind.SESSION, EventKind.OUTPUT):
                api.engine.bus.publish(Event(kind, sid, revision))
        with pytest.raises(TransportQueryError) as raised:
            await within(pending, 10)
            while True:
                await stream.next()
    error = raised.value.errors[0] if raised.value.errors else {}
    assert error.get("extensions", {}).get("code") == "RESYNC", raised.value
    assert "resubscribe" in error["message"]
    assert api.engine.bus.subscriber_count() == 0  # the bus subscription was closed


async def test_r3_bus_resync_event_ends_the_stream_with_an_error(api: Any) -> None:
    sid = await api.create_session()
    async with api.ws() as ws:
        stream = ws.subscribe(CANCELLATION_CHANGED, s=sid)
        await stream.next()
        api.engine.bus.publish(Event(EventKind.RESYNC, sid))
        with pytest.raises(TransportQueryError) as raised:
            await stream.next()
    assert raised.value.errors and raised.value.errors[0]["extensions"]["code"] == "RESYNC"


async def test_turn_output_streams_the_whole_answer_once(api: Any) -> None:
    sid = await api.create_session()
    async with api.ws() as ws:
        stream = ws.subscribe(TURN_OUTPUT, s=sid)
        first = await first_message_when_listening(api, stream)
        started = await api.mutate("sendMessage", "turn { id }", sessionId=sid, content="stream")
        chunks = [(await within(first, 10))["turnOutput"]]
        if not chunks[0]["done"]:
            chunks += [
                m["turnOutput"] for m in await stream.until(lambda m: m["turnOutput"]["done"])
            ]
        turn_id = started["turn"]["id"]
        assert {c["turnId"] for c in chunks} == {turn_id}
        text = "".join(c["text"] for c in chunks)
        assert [c["offset"] for c in chunks] == [
            sum(len(c["text"]) for c in chunks[:i]) for i in range(len(chunks))
        ]
        assert chunks[-1]["status"] == "COMPLETED"
        # A late subscriber gets the whole output of the (ended) turn as its snapshot.
        late = (await ws.subscribe(TURN_OUTPUT, s=sid).next())["turnOutput"]
    data = await api.data("query($id: ID!) { session(id: $id) { currentTurn { output } } }", id=sid)
    assert text == data["session"]["currentTurn"]["output"] == late["text"]
    assert late["done"] is True and late["offset"] == 0
