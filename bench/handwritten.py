"""The bench server's hand-written baseline (P4, P8; issue 27): ``setAutoRun``'s job done with the
least SQL a careful engineer would write by hand on the raw driver, behind a plain Starlette
endpoint. It measures turnqueue against the job, not against turnqueue's own statements (the
replay baseline, ``bench/baseline.py``, stays as an informative row).

Route (added to the bench server, ``bench/server.py``):

* ``POST /bench/handwritten/set-auto-run`` ``{"sessionId": id, "autoRun": bool, "notify": key?,
  "principal": p?}`` — in one write transaction: read the session's row under its lock with its
  owner and everything its queue status shows (policy, revision, the holds of ``heldBy``),
  refuse a caller who does not own it (``NOT_FOUND``, as turnqueue), write the policy and the
  next queue revision when the policy changes, read the visible entries; then answer JSON of
  the mutation's shape. With ``notify`` (P8) it then sends that status, encoded once as a
  ``queueStatusChanged`` payload in a graphql-transport-ws ``next`` frame, to the bare
  WebSocket opened as ``/bench/ws?key=<key>`` (one watcher per session: a bare send).

Statements per request (BEGIN and COMMIT included). PostgreSQL (asyncpg pool, as the store's):
BEGIN, the locked read (``FOR UPDATE OF`` the lock row), one data-modifying ``WITH`` writing
the policy and the revision, the entries, COMMIT: 5. SQLite (``sqlite3`` synchronously on the
event loop, as the store's writer: no thread hop; same pragmas): BEGIN IMMEDIATE, the read,
the policy upsert, the revision ``UPDATE … RETURNING`` (SQLite has no data-modifying ``WITH``),
the entries, COMMIT: 6.

What it leaves out, on purpose: no cross-instance NOTIFY (one process), no event bus, no
automatic drain. Auto-run ON starts the head only when entries are queued and nothing holds
them (Q3); the benchmark's queues are empty, so the job ends with the entries read, and the
baseline checks that instead of implementing a reservation.
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any

import asyncpg
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.websockets import WebSocket

from bench.baseline import RawDatabase
from turnqueue.api.view import LOCAL_PRINCIPAL

_HOLDS = """
  EXISTS (SELECT 1 FROM clarifications c WHERE c.session_id = l.session_id) AS clarification,
  EXISTS (SELECT 1 FROM session_holds h
          WHERE h.session_id = l.session_id AND h.kind = 'CANCELLING') AS cancelling,
  EXISTS (SELECT 1 FROM session_holds h
          WHERE h.session_id = l.session_id AND h.kind = 'WORKFLOW_TRANSITION') AS transitioning,
  EXISTS (SELECT 1 FROM approvals a JOIN turns u ON u.id = a.turn_id
          WHERE a.session_id = l.session_id AND a.outcome = 'PENDING'
            AND u.status = 'RUNNING') AS approval"""
_FROM = """
FROM queue_session_locks l
JOIN sessions s ON s.id = l.session_id
JOIN tasks t ON t.id = s.task_id
LEFT JOIN queue_session_state q ON q.session_id = l.session_id
WHERE l.session_id = {p}"""
_READ = "SELECT t.owner, s.state, l.revision, q.auto_run, q.pause_reason," + _HOLDS + _FROM

PG_READ = _READ.format(p="$1") + "\nFOR UPDATE OF l"
PG_WRITE = """
WITH policy AS (
  INSERT INTO queue_session_state (session_id, auto_run, pause_reason) VALUES ($1, $2, $3)
  ON CONFLICT (session_id) DO UPDATE
  SET auto_run = excluded.auto_run, pause_reason = excluded.pause_reason
)
UPDATE queue_session_locks SET revision = revision + 1 WHERE session_id = $1
RETURNING revision"""
PG_ENTRIES = """SELECT id, content FROM queue_entries
WHERE session_id = $1 AND NOT in_flight ORDER BY position, id"""

SQLITE_READ = _READ.format(p="?")
SQLITE_POLICY = """INSERT INTO queue_session_state (session_id, auto_run, pause_reason)
VALUES (?, ?, ?) ON CONFLICT (session_id) DO UPDATE
SET auto_run = excluded.auto_run, pause_reason = excluded.pause_reason"""
SQLITE_REVISION = """UPDATE queue_session_locks SET revision = revision + 1 WHERE session_id = ?
RETURNING revision"""
SQLITE_ENTRIES = """SELECT id, content FROM queue_entries
WHERE session_id = ? AND in_flight = 0 ORDER BY position, id"""

BUSY = {"RUNNING", "STARTING"}
PROMPTABLE = {"WAITING_FOR_INPUT", "COMPLETED"}


class Refused(Exception):
    """The caller does not own the session (or it does not exist): answered as NOT_FOUND."""


def held_by(row: Any) -> list[str]:
    """Q9's holds, from the locked read (the order turnqueue answers them in)."""
    holds = ["BUSY"] if row[1] in BUSY else [] if row[1] in PROMPTABLE else ["NOT_PROMPTABLE"]
    names = ("CLARIFICATION", "CANCELLING", "WORKFLOW_TRANSITION", "APPROVAL")
    return holds + [name for name, flag in zip(names, row[5:9], strict=True) if flag]


def status(sid: str, row: Any, auto_run: bool, revision: int, entries: list[Any]) -> dict[str, Any]:
    return {
        "id": sid,
        "sessionId": sid,
        "revision": revision,
        "autoRun": auto_run,
        "pauseReason": None if auto_run else "USER",
        "heldBy": held_by(row),
        "count": len(entries),
        "entries": [{"id": e[0], "content": e[1]} for e in entries],
    }


def on_sqlite(conn: sqlite3.Connection, sid: str, principal: str, on: bool) -> dict[str, Any]:
    """The job in one write transaction, synchronously (no statement yields the loop)."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        row = conn.execute(SQLITE_READ, (sid,)).fetchone()
        if row is None or row[0] != principal:
            raise Refused
        revision = row[2]
        if (True if row[3] is None else bool(row[3]), row[4]) != (on, None if on else "USER"):
            conn.execute(SQLITE_POLICY, (sid, on, None if on else "USER"))
            revision = conn.execute(SQLITE_REVISION, (sid,)).fetchone()[0]
        entries = conn.execute(SQLITE_ENTRIES, (sid,)).fetchall()
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    if on and entries:
        raise NotImplementedError("the baseline does not start turns: bench queues are empty")
    return status(sid, row, on, revision, entries)


async def on_postgres(pool: asyncpg.Pool, sid: str, principal: str, on: bool) -> dict[str, Any]:
    async with pool.acquire() as conn, conn.transaction():
        row = await conn.fetchrow(PG_READ, sid)
        if row is None or row[0] != principal:
            raise Refused
        revision = row[2]
        if (True if row[3] is None else row[3], row[4]) != (on, None if on else "USER"):
            revision = await conn.fetchval(PG_WRITE, sid, on, None if on else "USER")
        entries = await conn.fetch(PG_ENTRIES, sid)
    if on and entries:
        raise NotImplementedError("the baseline does not start turns: bench queues are empty")
    return status(sid, row, on, revision, entries)


def handwritten_routes(database_url: str, keyed: dict[str, WebSocket]) -> list[Route]:
    raw = RawDatabase(database_url)

    async def set_auto_run(request: Request) -> Response:
        body = await request.json()
        sid, on = str(body["sessionId"]), bool(body["autoRun"])
        principal = str(body.get("principal", LOCAL_PRINCIPAL))
        try:
            if raw.sqlite:
                queue = on_sqlite(raw.sqlite_conn(), sid, principal, on)
            else:
                queue = await on_postgres(await raw.pg_pool(), sid, principal, on)
        except Refused:
            error = {"code": "NOT_FOUND", "message": "session not found"}
            return JSONResponse({"data": {"setAutoRun": {"queue": None, "userErrors": [error]}}})
        notify = body.get("notify")
        if notify is not None:
            payload = json.dumps({"data": {"queueStatusChanged": queue}}, separators=(",", ":"))
            await keyed[str(notify)].send_text('{"id":"1","type":"next","payload":' + payload + "}")
        answer = {"dispatched": False, "queue": queue, "userErrors": []}
        return Response(
            json.dumps({"data": {"setAutoRun": answer}}, separators=(",", ":")),
            media_type="application/json",
        )

    return [Route("/bench/handwritten/set-auto-run", set_auto_run, methods=["POST"])]
