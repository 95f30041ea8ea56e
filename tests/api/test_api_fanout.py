"""Multiplexed subscription fan-out (turnqueue/api/fanout.py) against the real server.

Identical snapshot subscriptions (same document, variables and principal) share one execution.
What clients see must not change: R3 (snapshot first, then newer revisions; a subscriber that
cannot keep up is told to resubscribe), S2 (a member only ever gets its own principal's data),
errors and masking exactly as Strawberry's ordinary path sends them.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import os
import socket
import uuid
from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import UTC
from pathlib import Path
from typing import Any

import pytest
from clients import poll
from gql.transport.exceptions import TransportQueryError
from websockets.asyncio.client import ClientConnection, connect

from turnqueue.api.assembly import TurnqueueSchema
from turnqueue.api.fanout import FanOut
from turnqueue.api.view import MessageLimit
from turnqueue.bus import Event, EventKind, Watch
from turnqueue.resolvers.feeds import RESYNC_MESSAGE
from turnqueue.timeouts import within

WAIT = 10.0
QUEUE = """subscription($s: ID!) { queueStatusChanged(sessionId: $s) {
  id sessionId revision autoRun pauseReason heldBy count entries { content } } }"""
CANCELLATION = """subscription($s: ID!) { cancellationChanged(sessionId: $s) {
  id sessionId pending revision } }"""
#: only fields that move with the session's or the cancellation's revision: grouped
SESSION = """subscription($s: ID!) { sessionChanged(sessionId: $s) {
  id state revision promptable cancellationPending cancellationRevision
  cancellation { pending revision } clarification { question } currentTurn { status } } }"""
#: only basic fields (no resolver): rendered without execution (turnqueue.api.render)
PLAIN_SESSION = """subscription($s: ID!) { sessionChanged(sessionId: $s) {
  id taskId agent state revision promptable createdAt updatedAt } }"""
BIG = "subscription($s: ID!) { queueStatusChanged(sessionId: $s) { revision entries { content } } }"
RESYNC_PAYLOAD = {
    "data": None,
    "errors": [{"message": RESYNC_MESSAGE, "extensions": {"code": "RESYNC"}}],
}


def fanout_of(api: Any) -> FanOut:
    fanout: FanOut = api.app.state.fanout
    return fanout


def strictly_increasing(values: list[int]) -> bool:
    return all(a < b for a, b in itertools.pairwise(values))


async def paused_session(api: Any, token: str = "tok-a") -> str:
    """A session whose queue only grows (auto-run OFF): each enqueue is one queue revision."""
    sid: str = await api.create_session(token)
    await api.mutate("setAutoRun", "dispatched", token, sessionId=sid, autoRun=False)
    return sid


async def enqueue(api: Any, sid: str, content: str, token: str = "tok-a") -> int:
    payload = await api.mutate(
        "enqueueMessage", "queue { revision }", token, sessionId=sid, content=content
    )
    assert payload["userErrors"] == [], payload
    revision: int = payload["queue"]["revision"]
    return revision


async def queue_until(stream: Any, revision: int) -> list[dict[str, Any]]:
    messages = await stream.until(lambda m: m["queueStatusChanged"]["revision"] >= revision)
    return [m["queueStatusChanged"] for m in messages]


# -- raw graphql-transport-ws, to see every frame as sent ---------------------------------------
async def raw_open(api: Any, token: str = "tok-a", **kwargs: Any) -> ClientConnection:
    ws = await connect(
        api.ws_url,
        subprotocols=["graphql-transport-ws"],  # type: ignore[list-item]
        open_timeout=WAIT,
        ping_interval=None,
        **kwargs,
    )
    await ws.send(
        json.dumps({"type": "connection_init", "payload": {"authorization": f"Bearer {token}"}})
    )
    assert (await recv(ws))["type"] == "connection_ack"
    return ws


@contextlib.asynccontextmanager
async def raw(api: Any, token: str = "tok-a", **kwargs: Any) -> AsyncIterator[ClientConnection]:
    ws = await raw_open(api, token, **kwargs)
    try:
        yield ws
    finally:
        await ws.close()


async def subscribe(ws: ClientConnection, op_id: str, query: str, **variables: Any) -> None:
    payload = {"query": query, "variables": variables}
    await ws.send(json.dumps({"id": op_id, "type": "subscribe", "payload": payload}))


async def recv_text(ws: ClientConnection) -> str:
    frame = await within(ws.recv(), WAIT)
    assert isinstance(frame, str)
    return frame


async def recv(ws: ClientConnection) -> dict[str, Any]:
    frame: dict[str, Any] = json.loads(await recv_text(ws))
    return frame


async def nothing_more_before_pong(ws: ClientConnection) -> None:
    """The next frame is the answer to a ping: nothing was sent after the awaited frames."""
    await ws.send(json.dumps({"type": "ping"}))
    assert await recv(ws) == {"type": "pong"}


# -- R3: members, late joiners, leaving ---------------------------------------------------------
async def test_r3_fanout_members_get_the_snapshot_then_every_newer_revision_in_order(
    api: Any,
) -> None:
    sid = await paused_session(api)
    async with contextlib.AsyncExitStack() as stack:
        sockets = [await stack.enter_async_context(api.ws()) for _ in range(5)]
        streams = [ws.subscribe(QUEUE, s=sid) for ws in sockets]
        seen = [[(await stream.next())["queueStatusChanged"]] for stream in streams]
        stats = fanout_of(api).stats()
        assert (stats.groups, stats.members) == (1, 5)
        assert api.engine.bus.subscriber_count() == 1  # one execution serves all five
        for content in ("a", "b", "c"):
            revision = await enqueue(api, sid, content)
            for stream, mine in zip(streams, seen, strict=True):
                mine += await queue_until(stream, revision)
    assert all(mine == seen[0] for mine in seen)
    assert seen[0][0]["count"] == 0  # the snapshot first
    assert strictly_increasing([q["revision"] for q in seen[0]]) and len(seen[0]) == 4
    assert seen[0][-1]["entries"] == [{"content": "a"}, {"content": "b"}, {"content": "c"}]


async def test_r3_fanout_late_joiner_gets_the_current_snapshot_first(api: Any) -> None:
    sid = await paused_session(api)
    async with api.ws() as early_ws:
        early = early_ws.subscribe(QUEUE, s=sid)
        await early.next()
        revision = await enqueue(api, sid, "before the late joiner")
        current = (await queue_until(early, revision))[-1]
        async with api.ws() as late_ws:
            late = late_ws.subscribe(QUEUE, s=sid)
            assert (await late.next())["queueStatusChanged"] == current
            stats = fanout_of(api).stats()
            assert (stats.groups, stats.members) == (1, 2)  # it joined: a replay, no new read
            assert api.engine.bus.subscriber_count() == 1
            newer = await enqueue(api, sid, "after")
            assert (await late.next())["queueStatusChanged"]["revision"] == newer
            assert (await queue_until(early, newer))[-1]["revision"] == newer


async def test_r3_fanout_a_member_completing_or_disconnecting_does_not_end_the_others(
    api: Any,
) -> None:
    sid = await paused_session(api)
    fanout = fanout_of(api)
    async with contextlib.AsyncExitStack() as first_socket, api.ws() as other_ws, api.ws() as ws:
        # The first member's handler started the group; its connection goes away below.
        first_ws = await first_socket.enter_async_context(api.ws())
        first = first_ws.subscribe(QUEUE, s=sid)
        await first.next()
        completing = other_ws.subscribe(QUEUE, s=sid)
        staying = ws.subscribe(QUEUE, s=sid)
        await completing.next()
        await staying.next()
        [watch] = watches(api, sid)  # the group's feed (no task: a fed group holds none)
        assert fanout.leads() == []
        await completing.aclose()  # the client sends `complete` for this operation only

        async def members(count: int) -> bool:
            return fanout.stats().members == count

        await poll(lambda: members(2), "the completed member to leave")
        revision = await enqueue(api, sid, "one")
        assert (await queue_until(staying, revision))[-1]["revision"] == revision
        assert (await queue_until(first, revision))[-1]["revision"] == revision

        await first_socket.aclose()  # the first member's whole connection goes away
        await poll(lambda: members(1), "the disconnected member to leave")
        revision = await enqueue(api, sid, "two")
        assert (await queue_until(staying, revision))[-1]["revision"] == revision
        assert watches(api, sid) == [watch]  # the same feed throughout


async def test_r3_fanout_lead_ends_and_closes_its_bus_subscription_when_the_last_member_leaves(
    api: Any,
) -> None:
    """An executed group's lead task is cancelled, and a fed group's feed closed, when its last
    member leaves: nothing stays subscribed to the bus."""
    sid = await paused_session(api)
    fanout = fanout_of(api)
    async with api.ws() as ws:
        async with api.ws() as other_ws:
            for query in (QUEUE, SESSION):  # fed (rendered), executed (resolver fields)
                for stream in (ws.subscribe(query, s=sid), other_ws.subscribe(query, s=sid)):
                    await stream.next()
            [lead] = fanout.leads()  # SESSION's: a fed group holds no task
            assert api.engine.bus.subscriber_count() == 2
            assert fanout.stats().groups == 2 and fanout.stats().rendered == 1
    # Both connections are gone: the server cancels the lead when it sees the last one leave.
    await asyncio.wait({lead}, timeout=WAIT)
    assert lead.cancelled()
    await poll(lambda: _nothing_subscribed(api), "the feed to close")
    assert fanout.stats().groups == 0 and fanout.leads() == []


async def _nothing_subscribed(api: Any) -> bool:
    return bool(api.engine.bus.subscriber_count() == 0)


def watches(api: Any, sid: str) -> list[Any]:
    """The bus's callback subscribers of ``sid`` (a fed group's feed)."""
    return [s for s in api.engine.bus._subscribers.get(sid, ()) if isinstance(s, Watch)]


async def test_fanout_leads_stop_on_app_shutdown(start_api: Any) -> None:
    """Ownership: the app's lifespan stops every lead and feed; members are sent `complete`."""
    api = await start_api()
    sid = await paused_session(api)
    async with raw(api) as ws:
        await subscribe(ws, "1", QUEUE, s=sid)
        assert (await recv(ws))["type"] == "next"
        await subscribe(ws, "2", SESSION, s=sid)
        assert (await recv(ws))["type"] == "next"
        [lead] = fanout_of(api).leads()  # SESSION's (executed); QUEUE's group is fed
        await fanout_of(api).aclose()  # what the lifespan's shutdown runs
        assert lead.cancelled()
        ends = [await recv(ws), await recv(ws)]
        assert sorted(ends, key=str) == [
            {"id": "1", "type": "complete"},
            {"id": "2", "type": "complete"},
        ]
    assert api.engine.bus.subscriber_count() == 0


# -- S2: groups per variables and per principal -------------------------------------------------
async def test_s2_fanout_groups_by_variables_and_principal_and_a_foreign_principal_gets_not_found(
    api: Any,
) -> None:
    first, second = await paused_session(api), await paused_session(api)
    bobs = await paused_session(api, "tok-b")
    fanout = fanout_of(api)
    async with api.ws("tok-a") as alice, api.ws("tok-b") as bob:
        alice_first = alice.subscribe(QUEUE, s=first)
        assert (await alice_first.next())["queueStatusChanged"]["sessionId"] == first
        alice_second = alice.subscribe(QUEUE, s=second)
        assert (await alice_second.next())["queueStatusChanged"]["sessionId"] == second
        bob_own = bob.subscribe(QUEUE, s=bobs)
        assert (await bob_own.next())["queueStatusChanged"]["sessionId"] == bobs
        assert fanout.stats().groups == 3
        # The very document and variables of alice's group, as bob: his own group, NOT_FOUND.
        with pytest.raises(TransportQueryError) as raised:
            await bob.subscribe(QUEUE, s=first).next()
        assert raised.value.errors is not None
        assert raised.value.errors[0]["extensions"]["code"] == "NOT_FOUND"
        assert first not in str(raised.value.errors)
        assert fanout.stats().groups == 3  # bob's failed group is gone, alice's stays
        revision = await enqueue(api, first, "alice's")
        assert (await queue_until(alice_first, revision))[-1]["entries"] == [{"content": "alice's"}]


# -- errors, exactly as Strawberry sends them ---------------------------------------------------
async def test_s2_fanout_not_found_is_an_error_message_to_every_member(api: Any) -> None:
    unknown = str(uuid.uuid4())
    async with raw(api) as one, raw(api) as two:
        await subscribe(one, "1", QUEUE, s=unknown)
        await subscribe(two, "7", QUEUE, s=unknown)
        for ws, op_id in ((one, "1"), (two, "7")):
            frame = await recv(ws)
            assert (frame["id"], frame["type"]) == (op_id, "error")
            assert [e["extensions"]["code"] for e in frame["payload"]] == ["NOT_FOUND"]
            await nothing_more_before_pong(ws)  # `error` ends the operation: no `complete`


async def test_r3_fanout_resync_is_sent_to_every_member_then_complete(api: Any) -> None:
    sid = await paused_session(api)
    async with raw(api) as one, raw(api) as two:
        for ws in (one, two):
            await subscribe(ws, "q", QUEUE, s=sid)
            assert (await recv(ws))["type"] == "next"
        assert fanout_of(api).stats().members == 2
        api.engine.bus.publish(Event(EventKind.RESYNC, sid))
        for ws in (one, two):
            assert await recv(ws) == {"id": "q", "type": "next", "payload": RESYNC_PAYLOAD}
            assert await recv(ws) == {"id": "q", "type": "complete"}
    assert api.engine.bus.subscriber_count() == 0


async def test_s3_fanout_unexpected_errors_are_masked_for_every_member(
    api: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    sid = await paused_session(api)

    async def broken(session_id: str, event: Event) -> Any:
        raise RuntimeError("secret internals")

    async with raw(api) as one, raw(api) as two:
        for ws in (one, two):
            await subscribe(ws, "q", QUEUE, s=sid)
            assert (await recv(ws))["type"] == "next"
        monkeypatch.setattr(api.engine, "queue_status_after", broken)
        # An event without the status its transaction read (as another instance's): read.
        api.engine.bus.publish(Event(EventKind.QUEUE, sid, 2**40))
        for ws in (one, two):
            text = await recv_text(ws)
            assert "secret" not in text
            frame = json.loads(text)
            assert frame["type"] == "next" and frame["payload"]["data"] is None
            assert [e["message"] for e in frame["payload"]["errors"]] == ["Unexpected error."]
            assert await recv(ws) == {"id": "q", "type": "complete"}


@pytest.mark.parametrize("grouped", [True, False], ids=["fan-out", "ordinary"])
async def test_fanout_a_client_gone_mid_delivery_is_not_logged_as_an_error(
    api: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, grouped: bool
) -> None:
    """A subscriber whose connection drops while it is being sent to ends quietly, shared or
    not (turnOutput takes Strawberry's own path): abrupt disconnects are ordinary, and each one
    used to log an error with a traceback (scripts/soak.py: two thousand in four minutes)."""
    from strawberry.http.exceptions import WebSocketDisconnected

    sid = await paused_session(api)
    served = asyncio.Event()

    async def gone() -> AsyncIterator[Any]:  # the source, as the adapter's send raises it
        served.set()
        raise WebSocketDisconnected
        yield  # an async generator

    # Through the two seams a subscription's source comes from (public methods): the group's
    # results, or Strawberry's own stream; its run_operation catches it, logs it, re-raises it.
    if grouped:
        monkeypatch.setattr(FanOut, "share", lambda *_: gone())
    else:

        async def stream(*_: Any, **__: Any) -> AsyncIterator[Any]:
            return gone()

        monkeypatch.setattr(TurnqueueSchema, "stream", stream)
    query = QUEUE if grouped else "subscription($s: ID!) { turnOutput(sessionId: $s) { text } }"
    with caplog.at_level(logging.ERROR):
        async with raw(api) as ws:
            await subscribe(ws, "q", query, s=sid)
            await within(served.wait(), 10)
            await ws.send(json.dumps({"type": "ping"}))
            frame = await recv(ws)
            if frame == {"id": "q", "type": "complete"}:  # Strawberry tries to send it
                frame = await recv(ws)
            assert frame == {"type": "pong"}  # the handler lives on
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []
    monkeypatch.undo()
    async with raw(api) as ws:  # and the server serves on
        await subscribe(ws, "q", QUEUE, s=sid)
        assert (await recv(ws))["type"] == "next"


async def test_p3_r3_a_publishing_task_pays_for_no_members_send(
    api: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fed group's state is published inside ``publish``, in the task that committed it (a
    mutation's, under its session's lock): that task only schedules the rendering and the
    sends; no member's frame is written in it, idle members included (the sends made at
    once), and every member still gets the state."""
    sid = await paused_session(api)
    writers: list[asyncio.Task[Any] | None] = []
    send = MessageLimit.send

    async def recording(self: MessageLimit, message: Any) -> None:
        if '"next"' in message.get("text", ""):
            writers.append(asyncio.current_task())
        await send(self, message)

    monkeypatch.setattr(MessageLimit, "send", recording)  # observes every frame written
    async with raw(api) as one, raw(api) as two:
        for ws in (one, two):
            await subscribe(ws, "q", QUEUE, s=sid)
            assert (await recv(ws))["type"] == "next"  # the snapshot: prefixes learnt
        await enqueue(api, sid, "warm")  # both idle members are written to at once
        for ws in (one, two):
            assert (await recv(ws))["type"] == "next"
        assert fanout_of(api).stats().rendered == 1
        status = await api.engine.queue_status(sid)
        later = replace(status, revision=status.revision + 1)
        writers.clear()
        api.engine.bus.publish(Event(EventKind.QUEUE, sid, later.revision, queue=later))
        publisher = asyncio.current_task()
        assert writers == []  # nothing written while publish ran
        for ws in (one, two):
            frame = await recv(ws)
            assert frame["payload"]["data"]["queueStatusChanged"]["revision"] == later.revision
        assert len(writers) == 2 and publisher not in writers


async def _frames_of_a_script(api: Any) -> tuple[dict[str, list[str]], int | None]:
    """Every frame each operation receives, as text, with the run's own ids and revisions
    replaced (two servers, one database: ids differ, cancellation epochs too, R2); and how
    many of its groups the fan-out rendered without execution (None: no fan-out)."""
    sid = await paused_session(api)
    session = await api.engine.authorize_session("alice", sid)
    stamps = [session.created_at, session.updated_at, session.task_id]
    unknown = str(uuid.uuid4())
    frames: dict[str, list[str]] = {}

    def normalised(text: str) -> str:
        assert text == json.dumps(json.loads(text), separators=(",", ":"))  # compact, as sent
        text = text.replace(sid, "SID").replace(unknown, "UNKNOWN")
        for stamp in stamps:  # the session's own creation: another in each run
            text = text.replace(stamp if isinstance(stamp, str) else _iso(stamp), "STAMP")
        frame = json.loads(text)
        payload = frame.get("payload")
        data = payload.get("data") if isinstance(payload, dict) else None
        for value in (data or {}).values():
            for key in ("revision", "cancellationRevision"):
                if key in value:
                    value[key] = 0
            if "cancellation" in value:
                value["cancellation"]["revision"] = 0
        return json.dumps(frame)

    async def take(ws: ClientConnection, count: int) -> None:
        for _ in range(count):
            text = await recv_text(ws)
            frames.setdefault(json.loads(text)["id"], []).append(normalised(text))

    async with raw(api) as ws:
        await subscribe(ws, "queue", QUEUE, s=sid)
        await take(ws, 1)
        await subscribe(ws, "cancellation", CANCELLATION, s=sid)
        await take(ws, 1)
        await subscribe(ws, "session", SESSION, s=sid)
        await take(ws, 1)
        await subscribe(ws, "plain", PLAIN_SESSION, s=sid)
        await take(ws, 1)
        await subscribe(ws, "unknown", QUEUE, s=unknown)
        await take(ws, 1)
        fanout = api.app.state.fanout
        rendered = None if fanout is None else fanout.stats().rendered
        await enqueue(api, sid, "x")
        await take(ws, 1)
        api.engine.bus.publish(Event(EventKind.RESYNC, sid))
        await take(ws, 8)
        await nothing_more_before_pong(ws)
    return frames, rendered


def _iso(stamp: Any) -> str:
    return str(stamp.astimezone(UTC).isoformat().replace("+00:00", "Z"))


async def test_r3_s2_fanout_frames_are_those_of_the_ordinary_path(start_api: Any) -> None:
    """Contract: the same script, multiplexed and not, gets the same frames (Strawberry pinned)."""
    multiplexed = await start_api()
    ordinary = await start_api(subscription_fanout=False)
    assert ordinary.app.state.fanout is None
    got, rendered = await _frames_of_a_script(multiplexed)
    assert got == (await _frames_of_a_script(ordinary))[0]
    # queue, cancellation and the plain session rendered (turnqueue.api.render); SESSION's
    # cancellation fields have resolvers: executed; the unknown session: refused (S2).
    assert rendered == 3
    assert [json.loads(f)["type"] for f in got["unknown"]] == ["error"]
    assert json.loads(got["queue"][-2])["payload"] == RESYNC_PAYLOAD
    for frames in (got["queue"], got["cancellation"], got["session"], got["plain"]):
        assert [json.loads(f)["type"] for f in frames][-2:] == ["next", "complete"]


async def test_fanout_only_snapshot_subscriptions_are_grouped(api: Any) -> None:
    """turnOutput (deltas) and selections a revision does not cover take the ordinary path."""
    sid = await paused_session(api)
    fanout = fanout_of(api)
    ordinary = [
        "subscription($s: ID!) { turnOutput(sessionId: $s) { text } }",
        "subscription($s: ID!) { sessionChanged(sessionId: $s) { revision queue { count } } }",
        "subscription($s: ID!) { sessionChanged(sessionId: $s) { currentTurn { output } } }",
        "subscription($s: ID!) { sessionChanged(sessionId: $s) { task { workflowStep } } }",
    ]
    grouped = [
        QUEUE,
        CANCELLATION,
        SESSION,
        "subscription S($s: ID!) { sessionChanged(sessionId: $s) { ...F } }"
        " fragment F on Session { revision turns(last: 3) { id status } }",
    ]
    for query in ordinary:
        assert fanout.key(query, {"s": sid}, None, "alice") is None, query
    for query in grouped:
        assert fanout.key(query, {"s": sid}, None, "alice") is not None, query
    # Same document modulo layout, same variables: one group; another principal: another.
    alices = fanout.key(QUEUE, {"s": sid}, None, "alice")
    spaced = QUEUE.replace(" ", "  ").replace("\n", "\n\n")
    assert fanout.key(spaced, {"s": sid}, None, "alice") == alices
    assert fanout.key(QUEUE, {"s": sid}, None, "bob") != alices
    assert fanout.key(QUEUE, {"s": "other"}, None, "alice") != alices


async def test_fanout_keeps_max_subscriptions_per_connection(api: Any) -> None:
    sid = await paused_session(api)
    async with raw(api) as ws:
        for i in range(100):
            await subscribe(ws, str(i), QUEUE, s=sid)
        for _ in range(100):
            assert (await recv(ws))["type"] == "next"
        await subscribe(ws, "one too many", QUEUE, s=sid)
        frame = await recv(ws)
        assert (frame["id"], frame["type"]) == ("one too many", "error")
        assert frame["payload"][0]["message"] == "Subscription limit reached"
        assert fanout_of(api).stats().members == 100


# -- R3: a slow consumer ------------------------------------------------------------------------
def tcp_send_buffer_bytes() -> int:
    """The most the server's end of a loopback TCP connection can buffer (autotuned)."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        return int(Path("/proc/sys/net/ipv4/tcp_wmem").read_text().split()[2])
    return 8 * 2**20


async def small_buffer_socket(api: Any) -> socket.socket:
    """A connected socket with a small pinned receive buffer: a reader of nothing fills TCP's
    buffers after a few frames instead of megabytes."""
    port = int(api.base.rsplit(":", 1)[1])
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port))
    return sock


async def test_r3_fanout_a_member_that_does_not_read_neither_holds_up_the_others_nor_grows(
    start_api: Any,
) -> None:
    """The slow member's own task blocks in its socket's send; the lead and the fast member go
    on. It holds at most one payload; past ``subscriber_buffer`` replaced payloads it leaves
    the group and, once it reads again, gets RESYNC then `complete` (R3)."""
    api = await start_api(subscriber_buffer=4)
    fanout = fanout_of(api)
    sid = await paused_session(api)
    block = os.urandom(20_000).hex()  # incompressible: 5 entries make a ~200 kB payload
    entries = []
    for _ in range(5):
        payload = await api.mutate("enqueueMessage", "entry { id }", sessionId=sid, content=block)
        entries.append(payload["entry"]["id"])
    steps = 2 * tcp_send_buffer_bytes() // 200_000 + 64  # surely more than TCP can hold
    slow = await raw_open(
        api, max_queue=1, max_size=None, compression=None, sock=await small_buffer_socket(api)
    )
    try:
        async with raw(api, max_size=None, compression=None) as fast:
            await subscribe(slow, "1", BIG, s=sid)
            await subscribe(fast, "1", BIG, s=sid)
            seen = [(await recv(fast))["payload"]["data"]["queueStatusChanged"]["revision"]]
            assert fanout.stats().members == 2
            for step in range(steps):
                payload = await api.mutate(
                    "updateQueueEntry", "queue { revision }", sessionId=sid,
                    entryId=entries[step % 5], content=f"{step}{block}",
                )  # fmt: skip
                revision = payload["queue"]["revision"]
                while seen[-1] < revision:  # the fast member is never held up by the slow one
                    frame = await recv(fast)
                    assert frame["type"] == "next", frame
                    seen.append(frame["payload"]["data"]["queueStatusChanged"]["revision"])
                if fanout.stats().members == 1:
                    break  # the slow member was too far behind and left the group
            else:
                raise AssertionError(f"the slow member never fell behind in {steps} steps")
            assert strictly_increasing(seen)
            assert fanout.stats().groups == 1 and len(watches(api, sid)) == 1
            # The slow member reads at last: what was sent before it fell behind, then RESYNC.
            frames = []
            for _ in range(steps + 2):
                frames.append(await recv(slow))
                if frames[-1]["type"] != "next" or "errors" in frames[-1]["payload"]:
                    break
            assert frames[-1] == {"id": "1", "type": "next", "payload": RESYNC_PAYLOAD}
            assert await recv(slow) == {"id": "1", "type": "complete"}
            delivered = [
                f["payload"]["data"]["queueStatusChanged"]["revision"] for f in frames[:-1]
            ]
            assert strictly_increasing(delivered) and set(delivered) <= set(seen)
            # The fast member's subscription goes on.
            revision = await enqueue(api, sid, "still live")
            assert (await recv(fast))["payload"]["data"]["queueStatusChanged"]["revision"] == (
                revision
            )
    finally:
        await slow.close()
