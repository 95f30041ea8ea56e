"""Cancellation across real ``turnqueue serve`` processes on one PostgreSQL (C5, C7, R2, Q7, M6).

Each test drives two server processes over HTTP and WebSocket. A LISTEN connection is cut with a
:class:`~cluster_helpers.PgProxy` in front of one process: its LISTEN backend is terminated while
the proxy holds new connections, so it stays cut, deterministically, until the test releases it.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import asyncpg  # type: ignore[import-untyped]
import pytest
from cluster_helpers import WAIT, PgProxy, Server, Subscriber

from turnqueue.store.notify import LISTENER_NAME, asyncpg_dsn
from turnqueue.timeouts import within

STATE = """query($s: ID!) { session(id: $s) { state cancellationPending cancellationRevision
  queue { revision autoRun pauseReason heldBy entries { content } }
  turns(last: 20) { prompt status error } } }"""
CANCEL_SUB = """subscription($s: ID!) { cancellationChanged(sessionId: $s) {
  pending revision } }"""


class Cluster:
    """Servers started in order (the first runs the migrations), some behind a proxy."""

    def __init__(self, database_url: str, tmp_path: Path) -> None:
        self.database_url = database_url
        self._tmp = tmp_path
        self.servers: list[Server] = []
        self.proxies: list[PgProxy] = []

    async def start(self, *, proxied: bool = False, **env: str) -> tuple[Server, PgProxy | None]:
        proxy = None
        url = self.database_url
        if proxied:
            proxy = PgProxy(self.database_url)
            self.proxies.append(proxy)
            url = await proxy.start()
        log = self._tmp / f"server{len(self.servers)}.log"
        server = Server(url, log, **env)
        self.servers.append(server)
        return await server.start(), proxy

    async def cut_listen(self, proxy: PgProxy) -> None:
        """Terminate the LISTEN connection of the process behind ``proxy``, which holds its
        reconnection until ``proxy.release()``."""
        proxy.hold()
        conn = await asyncpg.connect(asyncpg_dsn(self.database_url))
        query = (
            "FROM pg_stat_activity WHERE datname = current_database() "
            "AND application_name = $2 AND client_port = ANY($1::int[])"
        )
        try:
            ports = sorted(proxy.backends)
            killed = await conn.fetchval(
                f"SELECT count(pg_terminate_backend(pid)) {query}", ports, LISTENER_NAME
            )
            assert killed == 1, "the process behind the proxy has one LISTEN connection"
            for _ in range(int(WAIT / 0.02)):  # bounded: until that backend has exited
                if not await conn.fetchval(f"SELECT count(*) {query}", ports, LISTENER_NAME):
                    return
                await asyncio.sleep(0.02)
            raise AssertionError("the LISTEN backend did not exit")
        finally:
            await conn.close()

    async def aclose(self) -> None:
        for proxy in self.proxies:
            proxy.release()
        # Stopping waits for the process: off the loop, which still runs the proxies.
        for server in reversed(self.servers):
            await asyncio.to_thread(server.stop)
        for proxy in self.proxies:
            await proxy.aclose()


@pytest.fixture
async def cluster(pg_database_url: str, tmp_path: Path) -> AsyncIterator[Cluster]:
    group = Cluster(pg_database_url, tmp_path)
    yield group
    await group.aclose()


async def state(server: Server, sid: str) -> dict[str, Any]:
    data = await server.gql(STATE, s=sid)
    session: dict[str, Any] = data["session"]
    return session


async def until(
    server: Server, sid: str, check: Callable[[dict[str, Any]], bool], what: str
) -> dict[str, Any]:
    """Poll another process's answer until ``check`` holds (bounded)."""
    deadline = asyncio.get_running_loop().time() + WAIT
    while True:
        last = await state(server, sid)
        if check(last):
            return last
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what}; last answer: {last}")
        await asyncio.sleep(0.05)


async def test_c6_c7_an_instance_whose_listen_is_cut_still_answers_the_rows_and_resyncs(
    cluster: Cluster,
) -> None:
    """C6/C7, Q9, R3: A runs a stubborn turn and a cancel; B's subscriber sees ``pending:
    true``; B's LISTEN is cut while the cancel ends. B's answers are still A's, read from the
    rows (pending false at A's revision; no CANCELLING hold), so a message sent through B
    starts at once; once LISTEN is back, B's subscriber is told to resync and reads the same.
    (When B relayed what it heard, it answered a stale ``pending: true`` until it asked A.)"""
    # The cancel ends when A escalates, 6 s after accepting it. A is stopped (SIGSTOP) as soon
    # as B's subscriber has seen pending, and only continued once B's LISTEN is cut: however
    # slow the cut, A cannot end the cancel before it. The long lease keeps B from taking A for
    # dead while it is stopped.
    env = {
        "TURNQUEUE_SCRIPTED_TURN_SECONDS": "30",
        "TURNQUEUE_CANCEL_TIMEOUT": "6",
        "TURNQUEUE_LEASE_SECONDS": "60",
    }
    a, _ = await cluster.start(**env)
    b, proxy = await cluster.start(proxied=True, **env)
    assert proxy is not None and a.process is not None
    sid = await a.create_session()
    await a.mutate("sendMessage", "turn { id }", sessionId=sid, content="/stubborn")  # A owns it
    async with Subscriber(b, CANCEL_SUB, s=sid) as on_b:
        assert (await on_b.next())["cancellationChanged"]["pending"] is False  # the snapshot
        cancel = asyncio.create_task(a.mutate("cancel", "outcome", sessionId=sid))
        assert (await on_b.next())["cancellationChanged"]["pending"] is True
        a.process.send_signal(signal.SIGSTOP)
        try:
            await cluster.cut_listen(proxy)
        finally:
            a.process.send_signal(signal.SIGCONT)
        assert (await within(cancel, WAIT))["outcome"] == "ESCALATED"  # ignored INT
        on_a = await state(a, sid)
        on_b_now = await state(b, sid)
        assert on_a["cancellationPending"] is False
        assert on_b_now["cancellationPending"] is False  # the rows, not a relay it missed
        assert on_b_now["cancellationRevision"] == on_a["cancellationRevision"]
        assert "CANCELLING" not in on_b_now["queue"]["heldBy"]
        sent = await b.mutate(
            "sendMessage", "turn { id } queuedEntry { id }", sessionId=sid, content="via B"
        )
        assert sent["turn"] is not None and sent["queuedEntry"] is None  # not held
        proxy.release()  # LISTEN comes back: B's subscribers are told to resync (R3)
        with pytest.raises(Exception, match="resubscribe"):
            await on_b.next()
    after = await state(b, sid)
    assert [(t["prompt"], t["status"]) for t in after["turns"]][:1] == [("/stubborn", "CANCELLED")]
    assert [t["prompt"] for t in after["turns"]] == ["/stubborn", "via B"]


async def test_r2_an_older_instance_cancelling_a_later_turn_continues_above_the_newer_one(
    cluster: Cluster,
) -> None:
    """R2: A starts first, B second (a newer epoch). B owns and cancels turn 1 while A's LISTEN
    is cut (A hears none of it); A then owns and cancels turn 2. Every client sees the four
    transitions with growing revisions (one durable counter per session, on its lock row)."""
    env = {"TURNQUEUE_SCRIPTED_TURN_SECONDS": "30"}
    a, proxy = await cluster.start(proxied=True, **env)
    b, _ = await cluster.start(**env)
    assert proxy is not None
    sid = await b.create_session()
    async with Subscriber(b, CANCEL_SUB, s=sid) as on_b:
        await on_b.next()  # the snapshot
        await cluster.cut_listen(proxy)
        await b.mutate("sendMessage", "turn { id }", sessionId=sid, content="turn 1")  # B owns
        first = await b.mutate("cancel", "outcome", sessionId=sid)
        proxy.release()
        await a.mutate("sendMessage", "turn { id }", sessionId=sid, content="turn 2")  # A owns
        second = await a.mutate("cancel", "outcome", sessionId=sid)
        seen = [(await on_b.next())["cancellationChanged"] for _ in range(4)]
    assert first["outcome"] == second["outcome"] == "STOPPED"
    assert [s["pending"] for s in seen] == [True, False, True, False]
    revisions = [s["revision"] for s in seen]
    assert revisions == sorted(set(revisions)), f"revisions went back: {revisions}"
    turns = await b.turns(sid)
    assert [t["status"] for t in turns] == ["CANCELLED", "CANCELLED"]


async def test_r2_revisions_grow_across_owners_when_every_instance_hears_the_other(
    cluster: Cluster,
) -> None:
    """R2 without any outage: B (newer) cancels turn 1, A (older) cancels turn 2; a
    subscriber on A sees the four transitions in order with growing revisions."""
    env = {"TURNQUEUE_SCRIPTED_TURN_SECONDS": "30"}
    a, _ = await cluster.start(**env)
    b, _ = await cluster.start(**env)
    sid = await b.create_session()
    seen: list[dict[str, Any]] = []
    async with Subscriber(a, CANCEL_SUB, s=sid) as on_a:
        await on_a.next()
        for owner, prompt in ((b, "turn 1"), (a, "turn 2")):
            sent = await owner.mutate("sendMessage", "turn { id }", sessionId=sid, content=prompt)
            assert sent["turn"] is not None, f"{prompt} did not start: {sent}"
            cancelled = await owner.mutate("cancel", "outcome", sessionId=sid)
            assert cancelled["outcome"] == "STOPPED", cancelled
            seen += [(await on_a.next())["cancellationChanged"] for _ in range(2)]
    assert [s["pending"] for s in seen] == [True, False, True, False]
    revisions = [s["revision"] for s in seen]
    assert revisions == sorted(set(revisions)), f"revisions went back: {revisions}"


async def test_q7_m6_sigkill_of_the_owner_mid_cancel_leaves_the_backlog_parked(
    cluster: Cluster,
) -> None:
    """Q7/M6: A accepts an explicit cancel of a stubborn turn (it ignores the interrupt) with
    two entries queued, and is SIGKILLed mid-cancel. B recovers the session after A's lease
    expires: the turn fails as interrupted, and the backlog stays parked (reason CANCEL, in
    order) instead of the next entry starting; a user's resume then runs it."""
    env = {"TURNQUEUE_SCRIPTED_TURN_SECONDS": "30", "TURNQUEUE_CANCEL_TIMEOUT": "60"}
    a, _ = await cluster.start(**env)
    b, _ = await cluster.start(**env)
    sid = await a.create_session()
    await a.mutate("sendMessage", "turn { id }", sessionId=sid, content="/stubborn")  # A owns it
    for content in ("next-1", "next-2"):
        await a.mutate("enqueueMessage", "entry { id }", sessionId=sid, content=content)
    before = (await state(a, sid))["queue"]["revision"]
    cancel = asyncio.create_task(a.mutate("cancel", "outcome", sessionId=sid))

    def accepted(s: dict[str, Any]) -> bool:  # the hold's revision is committed
        return bool(s["cancellationPending"] and s["queue"]["revision"] > before)

    await until(a, sid, accepted, "A to accept the cancel")
    a.kill()
    with pytest.raises(Exception):  # noqa: B017 (the connection dies with the process)
        await cancel

    def recovered(s: dict[str, Any]) -> bool:
        return bool(s["turns"][0]["status"] != "RUNNING")

    await until(b, sid, recovered, "B to recover A's session")  # the lease is 1.5 s
    # Read again: one query's fields are separate reads, so the answer that saw the turn end
    # may have read the queue or the state just before the recovery's commit.
    after = await state(b, sid)
    assert [(t["prompt"], t["status"], t["error"]) for t in after["turns"]] == [
        ("/stubborn", "FAILED", "interrupted")
    ]
    queue = after["queue"]
    assert queue["autoRun"] is False and queue["pauseReason"] == "CANCEL"
    assert [e["content"] for e in queue["entries"]] == ["next-1", "next-2"]
    assert after["state"] == "WAITING_FOR_INPUT" and after["cancellationPending"] is False
    resumed = await b.mutate("setAutoRun", "turn { prompt }", sessionId=sid, autoRun=True)
    assert resumed["turn"] == {"prompt": "next-1"}  # the user resumes: one entry, in order
