"""Crash torture and graceful shutdown (Q10, Q13, M6, R2) against real ``turnqueue serve``
processes.

The torture: a few concurrent clients run a mix of queue operations (enqueue, edit, remove,
reorder, setAutoRun, sendNow ENTRY, cancel, drain) on sessions of their own while the server is
SIGKILLed at a random moment; it is restarted and, once recovery has settled, every acknowledged
entry must exist exactly once (queued, or as one turn's prompt), every policy must be the one the
last acknowledged answer reported (or the effect of the one request cut off by the kill), no
session may stay RUNNING, and no revision may have gone back.

Each session is driven by exactly one sequential client, so "last acknowledged" is well defined;
only ENTRY-scoped Send Now is used, so every turn's prompt is exactly one entry's content.
``TURNQUEUE_TORTURE_ROUNDS`` (default 8) sets the number of kills.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from clients import poll
from ops_helpers import Client, ProcServer
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import create_async_engine

from turnqueue.settings import async_database_url
from turnqueue.store.tables import queue_entries, turns
from turnqueue.timeouts import within

ROUNDS = int(os.environ.get("TURNQUEUE_TORTURE_ROUNDS", "8"))
CLIENTS = 4
SESSIONS_PER_CLIENT = 2
SETTLE_SECONDS = 40.0
VERIFY_Q = """query($s: ID!) { session(id: $s) {
  state revision queue { autoRun revision count heldBy entries { id content } }
  turns(last: 200) { prompt status } } }"""
WEIGHTS = {
    "enqueueMessage": 34,
    "updateQueueEntry": 14,
    "removeQueueEntry": 8,
    "reorderQueue": 5,
    "setAutoRun": 16,
    "sendNow": 8,
    "cancel": 8,
    "drain": 7,
}
QUEUE_SEL = "queue { autoRun revision }"


@dataclass
class EntryRec:
    key: str
    id: str | None = None
    acked: bool = False  # the enqueue was acknowledged (or the entry was seen since)
    versions: set[str] = field(default_factory=set)  # contents it may have now
    removed: bool | None = False  # True: acknowledged removal; None: removal cut off by a kill


@dataclass
class SessRec:
    id: str
    auto_possible: set[bool]
    queue_rev: int = 0
    session_rev: int = 0
    entries: dict[str, EntryRec] = field(default_factory=dict)


@dataclass
class Totals:
    attempted: int = 0
    acknowledged: int = 0
    refused: int = 0  # answered with userErrors (changed nothing)
    cut_off: int = 0  # in flight when the server was killed
    kills: int = 0
    entries_acknowledged: int = 0
    entries_checked: int = 0
    entries_lost: int = 0
    entries_duplicated: int = 0
    stalled_queues: int = 0  # idle, auto-run ON, entries queued, nothing holding (Q9, M6)
    faults: list[str] = field(default_factory=list)


class CutOff(Exception):
    """The request did not get an answer: the server died under it."""


async def call(client: Client, name: str, selection: str, **input: Any) -> dict[str, Any]:
    try:
        body = await client.gql(
            f"mutation($input: {name[0].upper() + name[1:]}Input!) {{ {name}(input: $input) "
            f"{{ {selection} userErrors {{ code message }} }} }}",
            input=input,
        )
    except (httpx.TransportError, json.JSONDecodeError) as exc:
        raise CutOff(str(exc)) from exc
    if "errors" in body:
        raise AssertionError(f"S3: a fault reached the client: {body}")
    payload: dict[str, Any] = body["data"][name]
    return payload


class Worker:
    def __init__(self, n: int, sessions: list[SessRec], totals: Totals, rng: random.Random) -> None:
        self.n = n
        self.sessions = sessions
        self.totals = totals
        self.rng = rng
        self.counter = 0

    def _key(self) -> str:
        self.counter += 1
        return f"c{self.n}n{self.counter}-{self.rng.randrange(10**6)}"

    async def run(self, client: Client) -> None:
        """Run operations until the server dies under one of them."""
        ops, weights = zip(*WEIGHTS.items(), strict=True)
        while True:
            sess = self.rng.choice(self.sessions)
            op = self.rng.choices(ops, weights)[0]
            self.totals.attempted += 1
            try:
                await self.one(client, sess, op)
            except CutOff:
                self.totals.cut_off += 1
                return

    def _live_entries(self, sess: SessRec) -> list[EntryRec]:
        return [e for e in sess.entries.values() if e.id is not None and e.removed is False]

    def _ack(self, sess: SessRec, payload: dict[str, Any], auto: bool | None = None) -> None:
        """An acknowledged answer: its queue status is now the durable truth (Q1, Q13)."""
        self.totals.acknowledged += 1
        queue = payload.get("queue") or payload["session"]["queue"]
        assert queue["revision"] >= sess.queue_rev, ("Q13: revision went back", sess.id, queue)
        sess.queue_rev = queue["revision"]
        if auto is not None:
            assert queue["autoRun"] is auto, (sess.id, payload)
        sess.auto_possible = {queue["autoRun"]}

    async def one(self, client: Client, sess: SessRec, op: str) -> None:
        rng = self.rng
        live = self._live_entries(sess)
        if op == "enqueueMessage" or (not live and op in ("updateQueueEntry", "removeQueueEntry")):
            key = self._key()
            content = f"{key}#v0"
            rec = EntryRec(key, versions={content})
            sess.entries[key] = rec
            try:
                p = await call(
                    client, "enqueueMessage", f"entry {{ id }} {QUEUE_SEL}", sessionId=sess.id,
                    content=content,
                )  # fmt: skip
            except CutOff:
                raise
            if p["userErrors"]:
                self.totals.refused += 1
                rec.removed = True  # refused: it must never appear
                return
            rec.id, rec.acked = p["entry"]["id"], True
            self.totals.entries_acknowledged += 1
            prev = sess.auto_possible
            self._ack(sess, p)
            assert sess.auto_possible <= prev, ("Q1: enqueue changed the policy", p)
            return
        if op == "updateQueueEntry":
            rec = rng.choice(live)
            content = f"{rec.key}#v{rng.randrange(1, 10**6)}"
            try:
                p = await call(
                    client, "updateQueueEntry", QUEUE_SEL, sessionId=sess.id, entryId=rec.id,
                    content=content,
                )  # fmt: skip
            except CutOff:
                rec.versions.add(content)
                raise
            if p["userErrors"]:
                self.totals.refused += 1
                return
            rec.versions = {content}
            self._ack(sess, p, auto=next(iter(sess.auto_possible)))
            return
        if op == "removeQueueEntry":
            rec = rng.choice(live)
            try:
                p = await call(client, op, QUEUE_SEL, sessionId=sess.id, entryId=rec.id)
            except CutOff:
                rec.removed = None
                raise
            if p["userErrors"]:
                self.totals.refused += 1
                return
            rec.removed = True
            self._ack(sess, p, auto=next(iter(sess.auto_possible)))
            return
        if op == "reorderQueue":
            try:
                data = await client.data(VERIFY_Q, s=sess.id)
            except (httpx.TransportError, json.JSONDecodeError) as exc:
                raise CutOff(str(exc)) from exc
            queue = data["session"]["queue"]
            ids = [e["id"] for e in queue["entries"]]
            rng.shuffle(ids)
            p = await call(
                client, op, QUEUE_SEL, sessionId=sess.id, orderedIds=ids,
                expectedRevision=queue["revision"],
            )  # fmt: skip
            if p["userErrors"]:
                self.totals.refused += 1
                return
            self._ack(sess, p, auto=next(iter(sess.auto_possible)))
            return
        if op == "setAutoRun":
            value = rng.random() < 0.55
            try:
                p = await call(client, op, QUEUE_SEL, sessionId=sess.id, autoRun=value)
            except CutOff:
                sess.auto_possible.add(value)
                raise
            if p["userErrors"]:
                self.totals.refused += 1
                return
            self._ack(sess, p, auto=value)  # Q1/Q2
            return
        if op == "sendNow":
            if not live:
                return
            rec = rng.choice(live)
            try:
                p = await call(
                    client, op, f"{QUEUE_SEL} sentCount", sessionId=sess.id, scope="ENTRY",
                    entryId=rec.id,
                )  # fmt: skip
            except CutOff:
                sess.auto_possible.add(True)
                raise
            if p["userErrors"]:
                self.totals.refused += 1  # Q5: refused claims leave the policy as it was
                return
            assert p["sentCount"] == 1
            self._ack(sess, p, auto=True)  # Q5: the claim sets auto-run ON
            return
        if op == "drain":
            try:
                p = await call(client, op, f"{QUEUE_SEL} drained", sessionId=sess.id)
            except CutOff:
                sess.auto_possible.add(True)
                raise
            if p["userErrors"]:
                self.totals.refused += 1
                return
            self._ack(sess, p, auto=True)  # Q6
            return
        if op == "cancel":
            before = set(sess.auto_possible)
            try:
                p = await call(
                    client, op, "outcome session { revision queue { autoRun revision count } }",
                    sessionId=sess.id,
                )  # fmt: skip
            except CutOff:
                sess.auto_possible.add(False)  # Q7 may have parked the backlog
                raise
            if p["userErrors"]:
                self.totals.refused += 1
                return
            auto = p["session"]["queue"]["autoRun"]
            if p["outcome"] == "NOTHING_RUNNING":
                assert {auto} == before, ("C9: a no-op cancel changed auto-run", p)
            else:
                assert auto in before | {False}, ("Q7", p)
            self._ack(sess, p)
            sess.session_rev = max(sess.session_rev, p["session"]["revision"])
            return
        raise AssertionError(op)


async def settle(client: Client, sessions: list[SessRec]) -> dict[str, dict[str, Any]]:
    """Poll until recovery has settled: nothing RUNNING, nothing changing between two reads."""
    previous: dict[str, Any] | None = None
    deadline = asyncio.get_running_loop().time() + SETTLE_SECONDS
    while True:
        reads = await asyncio.gather(*(client.data(VERIFY_Q, s=s.id) for s in sessions))
        views = {s.id: r["session"] for s, r in zip(sessions, reads, strict=True)}
        signature = {
            sid: (v["state"], v["revision"], v["queue"]["revision"]) for sid, v in views.items()
        }
        busy = [sid for sid, v in views.items() if v["state"] in ("RUNNING", "STARTING")]
        if not busy and signature == previous:
            return views
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"M6: sessions stuck RUNNING after recovery: {busy}")
        previous = signature
        await asyncio.sleep(0.25)


def verify(sessions: list[SessRec], views: dict[str, dict[str, Any]], totals: Totals) -> None:
    for sess in sessions:
        view = views[sess.id]
        queue = view["queue"]
        assert view["state"] != "RUNNING", view
        assert all(t["status"] != "RUNNING" for t in view["turns"]), view["turns"]
        assert queue["autoRun"] in sess.auto_possible, (
            "Q1: policy is not the last acknowledged",
            sess.id,
            sess.auto_possible,
            queue,
        )
        assert queue["revision"] >= sess.queue_rev, ("R2/Q13: queue revision went back", sess.id)
        assert view["revision"] >= sess.session_rev, ("R2: session revision went back", sess.id)
        if (
            queue["autoRun"]
            and queue["count"]
            and not queue["heldBy"]
            and view["state"] == "WAITING_FOR_INPUT"
        ):
            totals.stalled_queues += 1
            if os.environ.get("TORTURE_DEBUG"):
                print("STALLED", sess.id, json.dumps(view)[:1500])
        seen: dict[str, list[tuple[str, str | None, str]]] = {}
        for entry in queue["entries"]:
            seen.setdefault(entry["content"].split("#")[0], []).append(
                ("queued", entry["id"], entry["content"])
            )
        for turn in view["turns"]:
            seen.setdefault(turn["prompt"].split("#")[0], []).append(("turn", None, turn["prompt"]))
        unknown = set(seen) - set(sess.entries)
        assert not unknown, ("an entry nobody enqueued", unknown)
        for key, rec in sess.entries.items():
            where = seen.get(key, [])
            totals.entries_checked += 1
            if len(where) > 1:
                totals.entries_duplicated += 1
                totals.faults.append(f"duplicated {key}: {where}")
                continue
            if rec.removed is True or (not rec.acked and not where):
                if where:
                    totals.faults.append(f"removed or refused {key} is back: {where}")
                rec.removed = True
                continue
            if rec.acked and rec.removed is False and not where:
                totals.entries_lost += 1
                totals.faults.append(f"Q10: acknowledged entry {key} lost")
                continue
            if not where:  # removal cut off by the kill, and it did happen
                rec.removed = True
                continue
            kind, entry_id, content = where[0]
            if content not in rec.versions:
                totals.faults.append(f"{key} has content {content!r}, not one of {rec.versions}")
            if kind == "queued" and rec.id is not None and entry_id != rec.id:
                totals.faults.append(f"Q10: {key} changed id {rec.id} -> {entry_id}")
            # What was seen is now the acknowledged truth for the next round.
            rec.acked, rec.versions, rec.removed = True, {content}, False
            rec.id = entry_id if kind == "queued" else None  # a turn is no longer editable
            if kind == "turn":
                rec.removed = None  # it ran: it must stay exactly one turn (checked by count)
                rec.acked = False
                rec.versions = {content}
        sess.auto_possible = {queue["autoRun"]}
        sess.queue_rev, sess.session_rev = queue["revision"], view["revision"]


@contextlib.asynccontextmanager
async def process(database_url: str, log: Path, **env: str) -> AsyncIterator[ProcServer]:
    server = ProcServer(database_url, log, **env)
    try:
        yield server
    finally:
        server.stop()


@pytest.mark.timeout(90 + ROUNDS * 20)  # scales with TURNQUEUE_TORTURE_ROUNDS
async def test_q10_m6_r2_sigkill_torture_loses_nothing(database_url: str, tmp_path: Path) -> None:
    rng = random.Random(os.environ.get("TURNQUEUE_TORTURE_SEED") or None)
    totals = Totals()
    history: list[SessRec] = []
    env = {"TURNQUEUE_SCRIPTED_TURN_SECONDS": "0.15", "TURNQUEUE_QUEUE_MAX": "12"}
    async with process(database_url, tmp_path / "torture.log", **env) as server:
        await server.start()
        for round_no in range(ROUNDS):
            client = server.client()
            fresh = [
                SessRec(await client.create_session(), {True})
                for _ in range(CLIENTS * SESSIONS_PER_CLIENT)
            ]
            workers = [
                Worker(
                    n, fresh[n * SESSIONS_PER_CLIENT : (n + 1) * SESSIONS_PER_CLIENT], totals, rng
                )
                for n in range(CLIENTS)
            ]
            clients = [server.client() for _ in workers]
            load = [asyncio.create_task(w.run(c)) for w, c in zip(workers, clients, strict=True)]
            await asyncio.sleep(rng.uniform(0.2, 1.5))  # the random moment of the crash
            for task in load:
                assert not task.done() or task.exception() is None, task.exception()
            server.kill()
            totals.kills += 1
            await within(asyncio.gather(*load), 30)
            for c in (client, *clients):
                await c.aclose()
            await server.start()
            client = server.client()
            try:
                checked = fresh + history[-CLIENTS * SESSIONS_PER_CLIENT :]
                views = await settle(client, checked)
                verify(checked, views, totals)
            finally:
                await client.aclose()
            assert not totals.faults, (round_no, totals.faults)
            history.extend(fresh)
    figures = {k: v for k, v in vars(totals).items() if k != "faults"}
    figures["store"] = database_url.split(":")[0]
    print(f"\nTORTURE-FIGURES {json.dumps(figures)}")
    assert totals.entries_lost == 0 and totals.entries_duplicated == 0
    # Q9/M6: an eligible queue runs after a restart (a SIGKILL between an enqueue's commit and
    # its drain used to leave it idle until a user acted).
    assert totals.stalled_queues == 0
    assert totals.kills == ROUNDS and totals.acknowledged > ROUNDS


# -- graceful shutdown (SIGTERM) -------------------------------------------------------------------
async def _db_state(database_url: str) -> tuple[int, int, dict[str, list[str]]]:
    """(RUNNING turns, in-flight entries, each session's queued contents in order), read from
    the database itself while no server runs."""
    engine = create_async_engine(async_database_url(database_url))
    try:
        async with engine.connect() as conn:
            running = await conn.scalar(
                select(func.count()).select_from(turns).where(turns.c.status == "RUNNING")
            )
            in_flight = await conn.scalar(
                select(func.count()).select_from(queue_entries).where(queue_entries.c.in_flight)
            )
            rows = await conn.execute(
                select(queue_entries.c.session_id, queue_entries.c.content).order_by(
                    queue_entries.c.session_id, queue_entries.c.position
                )
            )
            queued: dict[str, list[str]] = {}
            for session_id, content in rows:
                queued.setdefault(session_id, []).append(content)
    finally:
        await engine.dispose()
    return int(running or 0), int(in_flight or 0), queued


QUEUES_Q = """query($s: ID!) { session(id: $s) { state
  queue { autoRun pauseReason entries { id content } }
  turns { prompt status error } } }"""


async def test_m6_sigterm_stops_turns_and_hands_back_queued_work(
    database_url: str, tmp_path: Path
) -> None:
    """Graceful shutdown: the running turns end (not RUNNING), no entry is left in flight, the
    queues survive as they were, and the restarted server serves them (Q9: the eligible one
    runs its head again, the paused one stays as it was)."""
    async with process(
        database_url, tmp_path / "term.log", TURNQUEUE_SCRIPTED_TURN_SECONDS="30"
    ) as server:
        await server.start()
        client = server.client()
        busy = await client.create_session()
        await client.ok("sendMessage", "turn { id }", sessionId=busy, content="long")
        for text in ("a", "b"):
            await client.ok("enqueueMessage", "entry { id }", sessionId=busy, content=text)
        paused = await client.create_session()
        await client.ok("setAutoRun", "dispatched", sessionId=paused, autoRun=False)
        await client.ok("enqueueMessage", "entry { id }", sessionId=paused, content="held")
        before = {sid: await client.data(QUEUES_Q, s=sid) for sid in (busy, paused)}
        await client.aclose()
        # uvicorn re-raises the signal after a clean shutdown: -15, or 0 on older versions.
        assert server.term() in (0, -15)
        assert "Application shutdown complete" in server.log_text()
        running, in_flight, queued = await _db_state(database_url)
        assert (running, in_flight) == (0, 0)
        assert queued == {busy: ["a", "b"], paused: ["held"]}

        await server.start()
        client = server.client()
        try:
            after = {sid: await client.data(QUEUES_Q, s=sid) for sid in (busy, paused)}
        finally:
            await client.aclose()
    assert after[paused]["session"] == before[paused]["session"]
    session = after[busy]["session"]
    ended = session["turns"][0]
    assert ended["prompt"] == "long" and ended["status"] in ("CANCELLED", "FAILED"), ended
    assert ended["error"]
    later = [t["prompt"] for t in session["turns"][1:]]
    queued_now = [e["content"] for e in session["queue"]["entries"]]
    assert later + queued_now == ["a", "b"]  # each once, in order (Q10)
    ids = {e["content"]: e["id"] for e in before[busy]["session"]["queue"]["entries"]}
    assert all(e["id"] == ids[e["content"]] for e in session["queue"]["entries"])


async def test_m6_q9_after_a_graceful_restart_an_eligible_queue_runs(
    database_url: str, tmp_path: Path
) -> None:
    async with process(
        database_url, tmp_path / "term.log", TURNQUEUE_SCRIPTED_TURN_SECONDS="30"
    ) as server:
        await server.start()
        client = server.client()
        sid = await client.create_session()
        await client.ok("sendMessage", "turn { id }", sessionId=sid, content="long")
        await client.ok("enqueueMessage", "entry { id }", sessionId=sid, content="next")
        await client.aclose()
        server.term()
        await server.start()
        client = server.client()
        try:

            async def started() -> bool:
                data = await client.data(QUEUES_Q, s=sid)
                return bool(data["session"]["turns"][-1]["prompt"] == "next")

            await poll(started, "the queued head to start after the restart", timeout=3)
        finally:
            await client.aclose()
