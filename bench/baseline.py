"""The bench server's SQL-replay baseline (P4, P8): a plain Starlette endpoint doing the same SQL
statements as turnqueue's ``setAutoRun`` mutation, on a raw driver connection.

Routes (added to the bench server, ``bench/server.py``):

* ``POST /bench/record/start``, ``POST /bench/record/stop`` ``{"keep": name, "session": id,
  "answer": json}`` — record what the store sends to the database in between
  (``bench/sqlrecord.py``); ``keep`` stores the recording under ``name`` (``"on"``/``"off"``)
  for replay, with the session it was recorded on and the JSON answer to give. Answers the
  recording.
* ``POST /bench/replay/set-auto-run`` ``{"sessionId": id, "autoRun": bool, "notify": key?}`` —
  the baseline: the kept recording for ``autoRun``, with the recorded session's id replaced by
  ``sessionId`` in its parameters, replayed on the baseline's own connection; answers the kept
  JSON (same shape and size as the mutation's). With ``notify`` (P8) it then sends the bare
  frame (``POST /bench/bare-frame``) to the bare WebSocket opened as ``/bench/ws?key=<key>``.

Why this baseline: it is what a hand-written endpoint doing the same job costs. SQLite: one
``sqlite3`` connection used synchronously on the event loop (as the store's writer is; its reads
included, with no thread hop), same pragmas as the store. PostgreSQL: an asyncpg pool (as the
store's), one connection per request, asyncpg's reset query skipped (as the store does).
"""

from __future__ import annotations

import asyncio
import sqlite3
from dataclasses import replace
from typing import Any

import asyncpg
from sqlalchemy.engine import make_url
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.websockets import WebSocket

from bench.sqlrecord import (
    Recorder,
    Recording,
    Transaction,
    is_simple,
    replay_pg,
    replay_sqlite,
)
from turnqueue.store.postgres_conn import prepare_connection


class RawDatabase:
    """The baseline's driver connection(s) to the bench server's database, opened on first use."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.sqlite = url.startswith("sqlite")
        self._conn: sqlite3.Connection | None = None
        self._pool: asyncpg.Pool | None = None
        self._lock = asyncio.Lock()

    def sqlite_conn(self) -> sqlite3.Connection:
        if self._conn is None:
            path = make_url(self.url).database
            conn = sqlite3.connect(str(path), isolation_level=None)
            conn.execute("PRAGMA busy_timeout=5000")  # no other writer while it is measured
            conn.execute("PRAGMA synchronous=NORMAL")  # the file is already in WAL mode
            conn.execute("PRAGMA foreign_keys=ON")
            self._conn = conn
        return self._conn

    async def pg_pool(self) -> asyncpg.Pool:
        if self._pool is not None:
            return self._pool
        async with self._lock:
            if self._pool is None:
                dsn = make_url(self.url).set(drivername="postgresql")
                self._pool = await asyncpg.create_pool(
                    dsn.render_as_string(hide_password=False),
                    min_size=0,
                    max_size=5,
                    # The store's per-connection set-up: the statements it replays name the
                    # lock row's prepared statement (``EXECUTE turnqueue_lock_row(…)``).
                    init=prepare_connection,
                    reset=_no_reset,
                )
        return self._pool

    async def replay(self, recording: Recording) -> int:
        if self.sqlite:
            return replay_sqlite(self.sqlite_conn(), recording)
        pool = self._pool or await self.pg_pool()
        async with pool.acquire() as conn:
            return await replay_pg(conn, recording)


async def _no_reset(_connection: Any) -> None:
    """Skip asyncpg's reset query on release, as the store does (nothing changes session state)."""


def for_session(recording: Recording, old: str, new: str) -> Recording:
    """``recording`` with ``old`` replaced by ``new`` in every text parameter (inside arrays
    too), and in the text of simple queries, whose literals are their parameters (PostgreSQL's
    lock row and NOTIFY payloads)."""
    if old == new:
        return recording

    def swap(value: Any) -> Any:
        if isinstance(value, str):
            return value.replace(old, new) if old in value else value
        if isinstance(value, list | tuple):
            return type(value)(swap(v) for v in value)
        return value

    return replace(
        recording,
        transactions=tuple(
            Transaction(
                tx.connection,
                tuple(
                    replace(
                        s,
                        sql=swap(s.sql) if is_simple(s.sql, s.params) else s.sql,
                        params=tuple(swap(p) for p in s.params),
                    )
                    for s in tx.statements
                ),
            )
            for tx in recording.transactions
        ),
    )


class Kept:
    """A recording kept for replay: the session it was recorded on and the answer to give."""

    def __init__(self, recording: Recording, session: str, answer: Any) -> None:
        self.recording = recording
        self.session = session
        self.answer = answer
        self.by_session: dict[str, Recording] = {}

    def on(self, session: str) -> Recording:
        found = self.by_session.get(session)
        if found is None:
            found = self.by_session[session] = for_session(self.recording, self.session, session)
        return found


def replay_routes(database_url: str, keyed: dict[str, WebSocket]) -> list[Route]:
    raw = RawDatabase(database_url)
    kept: dict[str, Kept] = {}
    state: dict[str, Any] = {"frame": ""}

    async def record_start(_request: Request) -> JSONResponse:
        recorder = Recorder()
        recorder.start()
        state["recorder"] = recorder
        return JSONResponse({"ok": True})

    async def record_stop(request: Request) -> JSONResponse:
        body = await request.json()
        recording = await state.pop("recorder").stop()
        if body.get("keep"):
            kept[str(body["keep"])] = Kept(recording, str(body["session"]), body["answer"])
        return JSONResponse(recording.to_json())

    async def bare_frame(request: Request) -> JSONResponse:
        payload = (await request.body()).decode()
        state["frame"] = '{"id":"1","type":"next","payload":' + payload + "}"
        return JSONResponse({"ok": True})

    async def replay_set_auto_run(request: Request) -> Response:
        body = await request.json()
        which = kept["on" if body["autoRun"] else "off"]
        await raw.replay(which.on(str(body["sessionId"])))
        notify = body.get("notify")
        if notify is not None:
            await keyed[str(notify)].send_text(state["frame"])
        return JSONResponse(which.answer)

    return [
        Route("/bench/record/start", record_start, methods=["POST"]),
        Route("/bench/record/stop", record_stop, methods=["POST"]),
        Route("/bench/bare-frame", bare_frame, methods=["POST"]),
        Route("/bench/replay/set-auto-run", replay_set_auto_run, methods=["POST"]),
    ]
