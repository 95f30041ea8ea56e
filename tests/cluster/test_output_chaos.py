"""Chaos for the output log (O1, O2): clients that drop and resume at random offsets on two real
instances on PostgreSQL while the turn's owner is SIGKILLed mid-turn (M6).

Every client keeps the text it received; on each reconnect it resumes at a random offset at or
before what it has (keeping only that prefix), on a random live instance. At the end every
client's transcript must equal the turn's log in the database, byte for byte: nothing lost and
nothing repeated, through the kill and the recovery that ends the turn.
"""

from __future__ import annotations

import asyncio
import random
import signal
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import asyncpg  # type: ignore[import-untyped]
import pytest
from cluster_helpers import WAIT, Server, Subscriber

from turnqueue.agents.scripted import reply_for
from turnqueue.store.notify import asyncpg_dsn
from turnqueue.timeouts import within

StartServers = Callable[..., Awaitable[list[Server]]]
SUB = """subscription($s: ID!, $t: ID, $a: Int) {
  turnOutput(sessionId: $s, turnId: $t, afterOffset: $a) { offset text done status } }"""
CLIENTS = 6
PROMPT = "chaos " * 400  # a reply of about 2.5 KB, in 5 chunks


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


def _alive(server: Server) -> bool:
    return server.process is not None and server.process.poll() is None


async def test_o1_o2_m6_clients_resuming_at_random_offsets_through_a_sigkill_match_the_log(
    servers: StartServers, pg_database_url: str
) -> None:
    a, b = await servers(2, TURNQUEUE_SCRIPTED_TURN_SECONDS="6")
    sid = await a.create_session()
    sent = await a.mutate("sendMessage", "turn { id }", sessionId=sid, content=PROMPT)
    turn_id = sent["turn"]["id"]  # runs on A, which received it
    seen_text = asyncio.Event()
    rng = random.Random(1515)
    resumes = [0] * CLIENTS

    async def client(index: int) -> tuple[str, str]:
        own = random.Random(rng.random())
        transcript, status = "", None
        for attempt in range(300):  # bounded
            # Even clients start on A, the owner, which is killed before the turn ends and so
            # never sends its end: each of them must resume (on B) to see it.
            first = a if index % 2 == 0 else b
            server = first if attempt == 0 else own.choice([s for s in (a, b) if _alive(s)])
            after = own.randint(0, len(transcript))
            transcript = transcript[:after]
            try:
                async with Subscriber(server, SUB, s=sid, t=turn_id, a=after) as sub:
                    for _ in range(own.randint(1, 3)):
                        chunk = (await sub.next(timeout=WAIT))["turnOutput"]
                        assert chunk["offset"] == len(transcript), (index, chunk, len(transcript))
                        transcript += chunk["text"]
                        if transcript:
                            seen_text.set()
                        if chunk["done"]:
                            status = chunk["status"]
                            break
            except AssertionError:
                raise
            except Exception:
                if _alive(server):
                    raise
                # the instance died under this client: resume on the other one
            if status is not None:
                return transcript, status
            resumes[index] += 1
            await asyncio.sleep(own.random() * 0.2)  # jitter only; correctness never waits
        raise AssertionError(f"client {index} never saw the end")

    async def killer() -> None:
        await within(seen_text.wait(), WAIT)
        a.kill()  # SIGKILL of the owner, mid-turn

    results, _ = await within(
        asyncio.gather(asyncio.gather(*(client(i) for i in range(CLIENTS))), killer()), 90
    )
    conn = await asyncpg.connect(asyncpg_dsn(pg_database_url))
    try:
        rows = await conn.fetch(
            'SELECT seq, "offset", text FROM turn_output WHERE turn_id = $1 ORDER BY seq', turn_id
        )
        turn = await conn.fetchrow("SELECT status, output FROM turns WHERE id = $1", turn_id)
    finally:
        await conn.close()
    log = "".join(r["text"] for r in rows)
    assert [r["seq"] for r in rows] == list(range(len(rows)))
    assert [r["offset"] for r in rows] == [
        sum(len(x["text"]) for x in rows[:i]) for i in range(len(rows))
    ]
    assert log and reply_for(PROMPT).startswith(log) and log != reply_for(PROMPT)  # cut by the kill
    assert turn["status"] == "FAILED" and turn["output"] == log  # M6 ended it with the log
    for transcript, status in results:
        assert status == "FAILED"
        assert transcript == log  # 0 lost, 0 duplicated
    # Every client that started on A resumed; one on B may have been sent the log and its end
    # in one message (its first chunk still to come when A died, the end from B's recovery).
    assert all(resumes[0::2]), resumes


async def test_o2_m6_a_resume_at_the_end_of_the_log_gets_the_done_of_a_recovered_turn(
    servers: StartServers, pg_database_url: str
) -> None:
    """O2 × M6: a client resumes on B exactly at the end of what the log holds (nothing new to
    send), and no chunk follows because the owner A has stopped; B's recovery then ends the
    turn. The stream must send the turn's ``done`` (FAILED) instead of waiting forever: it
    follows the turn it resumed in even before it has yielded anything of it."""
    a, b = await servers(2, TURNQUEUE_SCRIPTED_TURN_SECONDS="6")
    sid = await a.create_session()
    sent = await a.mutate("sendMessage", "turn { id }", sessionId=sid, content=PROMPT)
    turn_id = sent["turn"]["id"]
    async with Subscriber(b, SUB, s=sid, t=turn_id, a=0) as first:
        assert (await first.next())["turnOutput"]["text"]  # the log has some of the turn
    assert a.process is not None
    a.process.send_signal(signal.SIGSTOP)  # no more chunks; its lease runs out (1.5 s)
    try:
        conn = await asyncpg.connect(asyncpg_dsn(pg_database_url))
        try:
            end = await conn.fetchval(
                "SELECT coalesce(sum(length(text)), 0) FROM turn_output WHERE turn_id = $1",
                turn_id,
            )
        finally:
            await conn.close()
        async with Subscriber(b, SUB, s=sid, t=turn_id, a=end) as resumed:
            chunk = (await resumed.next())["turnOutput"]
        assert chunk == {"offset": end, "text": "", "done": True, "status": "FAILED"}
    finally:
        a.process.send_signal(signal.SIGCONT)
        a.kill()
