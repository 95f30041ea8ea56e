"""R3 across real ``turnqueue serve`` processes: an equal revision is the same state, on every
instance and for every part of a status (holds and pending flags included).

Two instances on one PostgreSQL; several sessions driven at once by a seeded random workload
of the mutations a busy UI sends to whichever instance it reaches — prompts, clarifications and
their answers, queued prompts, cancels (of stubborn turns too), Send Now, auto-run — while
subscribers on both instances follow every session's queue, cancellation and session streams
and pollers on both read them. Every snapshot and event seen goes into a
:class:`~revision_ledger.Ledger`, which fails on any (kind, session, revision) seen with two
states. ``TQ_REVISION_RUN_SECONDS`` makes the run longer (the long run in docs/reliability.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from clients import Client
from cluster_helpers import Server, Subscriber
from revision_ledger import Ledger

QUEUE = "revision autoRun pauseReason heldBy count max entries { id content source }"
SESSION = "revision state clarification { id question }"
SUBSCRIPTIONS = {
    "queue": f"subscription($s: ID!) {{ queueStatusChanged(sessionId: $s) {{ {QUEUE} }} }}",
    "cancellation": """subscription($s: ID!) { cancellationChanged(sessionId: $s) {
      pending revision } }""",
    "session": f"subscription($s: ID!) {{ sessionChanged(sessionId: $s) {{ {SESSION} }} }}",
}
READ = f"""query($s: ID!) {{ session(id: $s) {{ {SESSION}
  cancellationPending cancellationRevision queue {{ {QUEUE} }} }} }}"""
#: seconds of random workload (CI: bounded; a long run sets TQ_REVISION_RUN_SECONDS)
RUN_SECONDS = float(os.environ.get("TQ_REVISION_RUN_SECONDS", "12"))
SESSIONS = 3


def record(ledger: Ledger, kind: str, sid: str, value: dict[str, Any], where: str) -> None:
    state = {k: v for k, v in value.items() if k != "revision"}
    ledger.see(kind, sid, int(value["revision"]), state, where)


def record_read(ledger: Ledger, sid: str, session: dict[str, Any], where: str) -> None:
    record(ledger, "queue", sid, session["queue"], where)
    record(
        ledger,
        "session",
        sid,
        {k: session[k] for k in ("revision", "state", "clarification")},
        where,
    )
    cancellation = {"pending": session["cancellationPending"]}
    ledger.see("cancellation", sid, int(session["cancellationRevision"]), cancellation, where)


async def follow(server: Server, kind: str, sid: str, ledger: Ledger, name: str) -> None:
    """Every event of one stream into the ledger, until cancelled."""
    async with Subscriber(server, SUBSCRIPTIONS[kind], s=sid) as sub:
        while True:
            data = await sub.next(timeout=3600)
            record(ledger, kind, sid, next(iter(data.values())), f"{name} {kind} stream")


async def poll(client: Client, sids: list[str], ledger: Ledger, name: str) -> None:
    while True:
        for sid in sids:
            data = await client.data(READ, s=sid)
            record_read(ledger, sid, data["session"], f"{name} query")
        await asyncio.sleep(0.01)


async def act(client: Client, sid: str, rng: random.Random) -> None:
    """One random mutation a UI could send now; refusals are answers too."""
    data = (await client.data(READ, s=sid))["session"]
    entries = data["queue"]["entries"]
    clarification = data["clarification"]
    choice = rng.choice(
        ["send", "send", "ask", "fail", "enqueue", "cancel", "cancel", "autorun", "sendnow"]
        + (["answer", "answer"] if clarification else [])
    )
    if choice == "send":
        await client.mutate("sendMessage", "turn { id }", sessionId=sid, content="hello")
    elif choice == "ask":
        await client.mutate("sendMessage", "turn { id }", sessionId=sid, content="/ask which?")
    elif choice == "fail":
        await client.mutate("sendMessage", "turn { id }", sessionId=sid, content="/fail now")
    elif choice == "enqueue":
        await client.mutate("enqueueMessage", "entry { id }", sessionId=sid, content="queued")
    elif choice == "cancel":
        await client.mutate("cancel", "outcome", sessionId=sid)
    elif choice == "autorun":
        on = rng.random() < 0.6
        await client.mutate("setAutoRun", "dispatched", sessionId=sid, autoRun=on)
    elif choice == "sendnow" and entries:
        entry = rng.choice(entries)["id"]
        await client.mutate("sendNow", "sentCount", sessionId=sid, scope="ENTRY", entryId=entry)
    elif choice == "answer" and clarification:
        await client.mutate("answerClarification", "session { id }", sessionId=sid, answer="this")


@pytest.fixture
async def two(pg_database_url: str, tmp_path: Path) -> AsyncIterator[list[Server]]:
    env = {
        "TURNQUEUE_SCRIPTED_TURN_SECONDS": "0.3",
        "TURNQUEUE_CANCEL_TIMEOUT": "0.3",
        "TURNQUEUE_ESCALATION_TIMEOUT": "0.3",
    }
    servers = [Server(pg_database_url, tmp_path / f"server{i}.log", **env) for i in range(2)]
    try:
        for server in servers:  # one after the other: the first runs the migrations
            await server.start()
        yield servers
    finally:
        for server in servers:
            await asyncio.to_thread(server.stop)


async def test_r3_q13_c7_one_revision_is_one_state_on_every_instance(two: list[Server]) -> None:
    """R3 (Q13, C7): through a random two-instance run of prompts, clarifications, cancels,
    Send Nows and auto-run changes, every snapshot and event of every session seen on either
    instance — subscription streams and polled reads alike — shows one state per revision of
    each kind. (Before the holds were rows, one queue revision was served with and without
    BUSY or CANCELLING, on one instance and across the two.)"""
    ledger = Ledger()
    rng = random.Random(int(os.environ.get("TQ_REVISION_SEED", "23")))
    clients = [Client(s.url.removesuffix("/graphql")) for s in two]
    sids = [
        (await clients[0].ok("createTask", "session { id }", title="r3"))["session"]["id"]
        for _ in range(SESSIONS)
    ]
    followers: list[asyncio.Task[None]] = []
    for i, server in enumerate(two):
        for sid in sids:
            for kind in SUBSCRIPTIONS:
                followers.append(asyncio.create_task(follow(server, kind, sid, ledger, f"#{i}")))
        followers.append(asyncio.create_task(poll(clients[i], sids, ledger, f"#{i}")))

    async def drive(sid: str, seed: int) -> None:
        local = random.Random(seed)
        deadline = asyncio.get_running_loop().time() + RUN_SECONDS
        while asyncio.get_running_loop().time() < deadline:
            await act(local.choice(clients), sid, local)
            await asyncio.sleep(local.uniform(0, 0.15))

    try:
        await asyncio.gather(*(drive(sid, rng.randrange(1 << 30)) for sid in sids))
        for sid in sids:  # read once more on both, after the run
            for i, client in enumerate(clients):
                record_read(ledger, sid, (await client.data(READ, s=sid))["session"], f"#{i}")
    finally:
        for task in followers:
            task.cancel()
        for task in followers:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        for client in clients:
            await client.aclose()
    assert ledger.count > 200, ledger.count
    ledger.check()
