"""Several real ``turnqueue serve`` processes sharing one PostgreSQL database (M4, C7, Q3, M6)."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import datetime
from pathlib import Path

import asyncpg  # type: ignore[import-untyped]
import pytest
from cluster_helpers import WAIT, Server, Subscriber

from turnqueue.store.notify import LISTENER_NAME, asyncpg_dsn

StartServers = Callable[..., Awaitable[list[Server]]]

QUEUE_SUB = """subscription($s: ID!) { queueStatusChanged(sessionId: $s) {
  revision autoRun entries { content } } }"""
CANCEL_SUB = """subscription($s: ID!) { cancellationChanged(sessionId: $s) {
  pending revision } }"""


@pytest.fixture
async def servers(pg_database_url: str, tmp_path: Path) -> AsyncIterator[StartServers]:
    started: list[Server] = []

    async def start(count: int = 2, **env: str) -> list[Server]:
        group = [Server(pg_database_url, tmp_path / f"server{i}.log", **env) for i in range(count)]
        for server in group:  # one after the other: the first runs the migrations
            started.append(await server.start())
        return group

    yield start
    for server in started:
        server.stop()


async def wait_until(check: Callable[[], Awaitable[bool]], what: str, every: float = 0.05) -> None:
    """Poll a cross-process condition (the other process is not ours to await on)."""
    for _ in range(int(WAIT / every)):
        if await check():
            return
        await asyncio.sleep(every)
    raise AssertionError(f"timed out waiting for {what}")


async def test_m4_a_subscriber_on_b_sees_changes_made_on_a(servers: StartServers) -> None:
    a, b = await servers(2)
    sid = await a.create_session()
    async with Subscriber(b, QUEUE_SUB, s=sid) as sub:
        snapshot = (await sub.next())["queueStatusChanged"]
        await a.mutate("setAutoRun", "queue { revision }", sessionId=sid, autoRun=False)
        paused = (await sub.next())["queueStatusChanged"]
        await a.mutate("enqueueMessage", "entry { id }", sessionId=sid, content="from A")
        queued = (await sub.next())["queueStatusChanged"]
    assert snapshot["autoRun"] is True
    assert paused["autoRun"] is False and paused["revision"] > snapshot["revision"]
    assert queued["entries"] == [{"content": "from A"}]
    assert queued["revision"] > paused["revision"]


async def test_m4_c7_a_cancel_sent_to_b_stops_the_turn_on_a_with_one_pair(
    servers: StartServers,
) -> None:
    a, b = await servers(2, TURNQUEUE_SCRIPTED_TURN_SECONDS="60")
    sid = await a.create_session()
    await a.mutate("sendMessage", "turn { id }", sessionId=sid, content="long work")  # A owns it
    async with Subscriber(a, CANCEL_SUB, s=sid) as on_a, Subscriber(b, CANCEL_SUB, s=sid) as on_b:
        first_a, first_b = (await on_a.next()), (await on_b.next())
        payload = await b.mutate(
            "cancel", "outcome cancellation { pending revision }", sessionId=sid
        )
        seen_a = [(await on_a.next())["cancellationChanged"] for _ in range(2)]
        seen_b = [(await on_b.next())["cancellationChanged"] for _ in range(2)]
        with pytest.raises(TimeoutError):  # exactly one pair: nothing more follows
            await on_b.next(timeout=0.5)
    assert payload["outcome"] == "STOPPED"
    assert [s["pending"] for s in seen_a] == [True, False] == [s["pending"] for s in seen_b]
    assert seen_a == seen_b  # the owner's revisions, relayed unchanged (C7)
    assert seen_b[0]["revision"] > first_b["cancellationChanged"]["revision"]
    assert first_a["cancellationChanged"]["pending"] is False
    assert payload["cancellation"] == seen_a[1]
    turns = await b.turns(sid)
    assert turns[-1]["status"] == "CANCELLED"


@pytest.mark.timeout(600)  # 200 races across two processes; ~400 s on a loaded 2-core machine
async def test_m4_q3_off_on_a_racing_turn_ends_on_b_never_starts_a_successor(
    servers: StartServers,
) -> None:
    """OFF sent to A races the ends of turns that B runs. Whatever the interleaving, no turn
    starts after OFF was acknowledged (its commit precedes the answer), the policy stays OFF,
    and every entry either ran once or is still queued, in order. (When OFF left the client is
    no bound: the server may take its time to process it; the exact cut is proven in-process by
    ``test_q3_off_racing_a_turn_end…`` in tests/engine.)"""
    a, b = await servers(2, TURNQUEUE_SCRIPTED_TURN_SECONDS="0.08")
    rng = random.Random(4)
    sessions = 10
    rounds = 20  # 200 races in all

    async def race(sid: str) -> None:
        for _ in range(rounds):
            before = len(await a.turns(sid))
            await b.mutate("setAutoRun", "queue { revision }", sessionId=sid, autoRun=False)
            for n in range(3):
                await b.mutate("enqueueMessage", "entry { id }", sessionId=sid, content=f"m{n}")
            await b.mutate("setAutoRun", "queue { revision }", sessionId=sid, autoRun=True)
            await asyncio.sleep(rng.uniform(0.0, 0.2))  # land OFF anywhere among the turns
            await a.mutate("setAutoRun", "queue { revision }", sessionId=sid, autoRun=False)
            acked = datetime.now().astimezone()

            async def idle() -> bool:
                return bool((await a.session(sid))["state"] != "RUNNING")

            # Ten sessions poll at once: every 0.05 s they were most of both servers' load.
            await wait_until(idle, "the session to settle", every=0.25)
            turns = (await a.turns(sid))[before:]
            starts = [datetime.fromisoformat(t["startedAt"]) for t in turns]
            assert not [s for s in starts if s > acked], "a turn started after OFF was acked"
            session = await a.session(sid)
            assert session["queue"]["autoRun"] is False
            left = [e["content"] for e in session["queue"]["entries"]]
            # Nothing lost or duplicated: every entry ran once or is still queued, in order.
            assert [t["prompt"] for t in turns] + left == ["m0", "m1", "m2"]
            await a.mutate("clearQueue", "queue { revision }", sessionId=sid)

    ids = [await b.create_session() for _ in range(sessions)]
    await asyncio.gather(*(race(sid) for sid in ids))


async def test_m6_sigkill_of_the_owner_mid_turn_is_recovered_by_another_instance(
    servers: StartServers,
) -> None:
    a, b = await servers(2, TURNQUEUE_SCRIPTED_TURN_SECONDS="30")
    sid = await a.create_session()
    await a.mutate("sendMessage", "turn { id }", sessionId=sid, content="doomed")
    for content in ("next-1", "next-2"):
        await a.mutate("enqueueMessage", "entry { id }", sessionId=sid, content=content)
    a.kill()

    async def recovered() -> bool:
        turns = await b.turns(sid)
        return len(turns) >= 2

    await wait_until(recovered, "B to recover A's session")  # the lease is 1.5 s
    turns = await b.turns(sid)
    assert turns[0]["prompt"] == "doomed" and turns[0]["status"] == "FAILED"
    assert turns[0]["error"] == "interrupted"
    assert [t["prompt"] for t in turns[1:]] == ["next-1"]  # B runs the next one, once
    session = await b.session(sid)
    assert session["state"] == "RUNNING"
    assert [e["content"] for e in session["queue"]["entries"]] == ["next-2"]  # nothing lost


async def test_m4_a_killed_listen_connection_is_recovered_with_a_resync(
    servers: StartServers, pg_database_url: str
) -> None:
    a, b = await servers(2)
    sid = await a.create_session()
    # Paused, so the entry enqueued below stays queued (an idle session would start it in the
    # enqueue's own transaction, and the relayed snapshot would show an empty queue).
    await a.mutate("setAutoRun", "queue { revision }", sessionId=sid, autoRun=False)
    async with Subscriber(b, QUEUE_SUB, s=sid) as sub:
        await sub.next()
        conn = await asyncpg.connect(asyncpg_dsn(pg_database_url))
        try:
            killed = await conn.fetchval(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE datname = current_database() AND application_name = $1",
                LISTENER_NAME,  # not "query LIKE 'LISTEN%'": a listener's last query may be a ping
            )
        finally:
            await conn.close()
        assert killed == 2  # both instances' listeners
        with pytest.raises(Exception, match="resubscribe"):
            await sub.next()  # told to resync, not left silently behind
    async with Subscriber(b, QUEUE_SUB, s=sid) as sub:
        before = (await sub.next())["queueStatusChanged"]
        await a.mutate("enqueueMessage", "entry { id }", sessionId=sid, content="after")
        after = (await sub.next())["queueStatusChanged"]  # relayed again
    assert after["revision"] > before["revision"]
    assert after["entries"] == [{"content": "after"}]


OUTPUT_SUB = """subscription($s: ID!) { turnOutput(sessionId: $s) {
  turnId offset text done } }"""


async def test_m4_turn_output_on_b_starts_with_the_output_so_far_on_a(
    servers: StartServers,
) -> None:
    """M4/R1: a turnOutput subscriber on an instance that does not run the turn gets the
    output so far first (the owner stores it on request), then the relayed chunks, with no gap
    and no overlap: the pieces concatenate to the turn's final output."""
    a, b = await servers(2, TURNQUEUE_SCRIPTED_TURN_SECONDS="3")
    sid = await a.create_session()
    await a.mutate("sendMessage", "turn { id }", sessionId=sid, content="stream please")
    async with Subscriber(a, OUTPUT_SUB, s=sid) as on_a:
        seen_on_a = ""
        while not seen_on_a:  # some output exists on A before B subscribes
            chunk = (await on_a.next())["turnOutput"]
            seen_on_a += chunk["text"]
        async with Subscriber(b, OUTPUT_SUB, s=sid) as on_b:
            pieces = [(await on_b.next())["turnOutput"]]
            while not pieces[-1]["done"]:
                pieces.append((await on_b.next())["turnOutput"])
    first = pieces[0]
    assert first["offset"] == 0 and first["text"].startswith(seen_on_a)
    end = 0
    for piece in pieces:
        assert piece["offset"] == end, pieces  # contiguous: nothing missing, nothing repeated
        end += len(piece["text"])
    data = await b.gql("query($s: ID!) { session(id: $s) { turns(last: 1) { output } } }", s=sid)
    assert "".join(p["text"] for p in pieces) == data["session"]["turns"][-1]["output"] != ""
