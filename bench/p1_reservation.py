"""P1: automatic reservations/s through the store (the Q3 transaction), 8 sessions in parallel.

Ours: ``SqlStore.transaction()`` → ``tx.lock`` → policy check → ``tx.reserve_head(owner=…)`` →
``tx.start_turn(consume=[…])`` → ``tx.bump_queue``: what ``Turns.reserve`` does
(its in-memory hold checks cost nothing here). Baseline: the same statements, hand-written, on
raw asyncpg (a pool of 8) or raw synchronous ``sqlite3`` (one connection; SQLite has one writer,
so the 8 sessions take turns). Each reservation consumes one of the session's queued entries.
"""

from __future__ import annotations

import asyncio
import re
import sqlite3
import time
import uuid
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path

import asyncpg

from bench.common import Backend, Config, Row, median, seed_sessions
from turnqueue.settings import Settings
from turnqueue.store.sql import SqlStore, open_store
from turnqueue.timeouts import within

SESSIONS = 8
OWNER = 1

# The statements the store runs for the Q3 transaction (compiled from its SQLAlchemy Core
# statements), written out by hand with qmark parameters; ``_pg`` turns them into $n with
# PostgreSQL's casts. On PostgreSQL the store sends START_TURN_PG instead of BUMP_SESSION,
# INSERT_TURN and CONSUME, and so does the baseline.
LOCK = "SELECT session_id FROM queue_session_locks WHERE session_id = ? FOR UPDATE"
VIEW = """
SELECT sessions.id, sessions.task_id, sessions.agent, sessions.state, sessions.revision,
  sessions.created_at, sessions.updated_at, sessions.complete_on_idle, tasks.owner,
  queue_session_locks.revision, queue_session_state.auto_run, queue_session_state.pause_reason,
  clarifications.id, clarifications.session_id, clarifications.turn_id, clarifications.question,
  clarifications.asked_at, queue_session_locks.queued,
  (SELECT turns.id FROM turns WHERE turns.session_id = queue_session_locks.session_id
     AND turns.status = 'RUNNING' ORDER BY turns.seq DESC LIMIT 1) AS running_turn_id,
  (SELECT turns.owner FROM turns WHERE turns.session_id = queue_session_locks.session_id
     AND turns.status = 'RUNNING' ORDER BY turns.seq DESC LIMIT 1) AS running_turn_owner,
  queue_session_locks.cancel_mark, queue_session_locks.cancel_revision,
  EXISTS (SELECT * FROM session_holds
    WHERE session_holds.session_id = queue_session_locks.session_id
      AND session_holds.kind = 'CANCELLING') AS cancelling,
  EXISTS (SELECT * FROM session_holds
    WHERE session_holds.session_id = queue_session_locks.session_id
      AND session_holds.kind = 'WORKFLOW_TRANSITION') AS transitioning,
  EXISTS (SELECT * FROM approvals
    WHERE approvals.session_id = queue_session_locks.session_id
      AND approvals.outcome = 'PENDING'
      AND EXISTS (SELECT * FROM turns
        WHERE turns.id = approvals.turn_id AND turns.status = 'RUNNING')) AS approval_pending
FROM queue_session_locks JOIN sessions ON sessions.id = queue_session_locks.session_id
  JOIN tasks ON tasks.id = sessions.task_id
  LEFT OUTER JOIN queue_session_state
    ON queue_session_state.session_id = queue_session_locks.session_id
  LEFT OUTER JOIN clarifications ON clarifications.session_id = queue_session_locks.session_id
WHERE queue_session_locks.session_id = ?"""
#: VIEW's columns the baseline reads.
AUTO_RUN, QUEUED = 10, 17
RESERVE = """
UPDATE queue_entries SET in_flight = {true}, reserved_at = ?, reserved_by = ?
WHERE queue_entries.id = (SELECT head.id FROM queue_entries AS head
  WHERE head.session_id = ? AND head.in_flight = {false} ORDER BY head.position, head.id LIMIT 1)
  AND queue_entries.in_flight = {false}
RETURNING id, session_id, content, source, queued_at, client_message_id"""
BUMP_SESSION = """
UPDATE sessions SET state = ?, revision = sessions.revision + 1, updated_at = ?
WHERE sessions.id = ? RETURNING revision"""
INSERT_TURN = """
INSERT INTO turns (id, session_id, seq, prompt, source, status, output, started_at, owner,
  client_message_id, entry_id)
SELECT ?{vc}, ?{vc}, coalesce(max(turns.seq), 0) + 1, ?{vc}, ?{vc}, 'RUNNING', '', ?{ts}, ?{big},
  ?{vc}, ?{vc}
FROM turns WHERE turns.session_id = ?"""
CONSUME = "DELETE FROM queue_entries WHERE queue_entries.id IN (?) AND in_flight = {true}"
#: PostgreSQL: the store runs BUMP_SESSION, INSERT_TURN and CONSUME as one statement.
START_TURN_PG = """
WITH started AS (
  INSERT INTO turns (id, session_id, seq, prompt, source, status, output, started_at, owner,
    client_message_id, entry_id)
  SELECT $1::VARCHAR, $2::VARCHAR, coalesce(max(turns.seq), 0) + 1, $3::VARCHAR, $4::VARCHAR,
    'RUNNING', '', $5::TIMESTAMPTZ, $6::BIGINT, $9::VARCHAR, $10::VARCHAR
  FROM turns WHERE turns.session_id = $2::VARCHAR),
consumed AS (
  DELETE FROM queue_entries WHERE queue_entries.id = $7::VARCHAR AND queue_entries.in_flight),
bumped AS (
  UPDATE sessions SET state = $8::VARCHAR, revision = sessions.revision + 1,
    updated_at = $5::TIMESTAMPTZ
  WHERE sessions.id = $2::VARCHAR RETURNING sessions.revision)
SELECT bumped.revision FROM bumped"""
BUMP_QUEUE = """
UPDATE queue_session_locks SET revision = queue_session_locks.revision + 1
WHERE queue_session_locks.session_id = ? RETURNING revision"""


PG_FORMAT = {
    "true": "true",
    "false": "false",
    "vc": "::VARCHAR",
    "ts": "::TIMESTAMPTZ",
    "big": "::BIGINT",
}


def _sqlite(sql: str) -> str:
    return sql.format(true="1", false="0", vc="", ts="", big="")


def _pg(sql: str) -> str:
    counter = iter(range(1, 100))
    return re.sub(r"\?", lambda _: f"${next(counter)}", sql.format(**PG_FORMAT))


# -- ours ---------------------------------------------------------------------------------------
async def q3_store(store: SqlStore, session_id: str) -> bool:
    """One automatic reservation exactly as ``Turns.reserve`` runs it against the store."""
    async with store.transaction() as tx:
        view = await tx.lock(session_id)
        if view.queued == 0 or not view.policy.auto_run:
            return False
        entry = await tx.reserve_head(session_id, owner=OWNER)
        if entry is None:
            return False
        await tx.start_turn(
            session_id, prompt=entry.content, source=entry.source, consume=[entry.id], owner=OWNER
        )
        await tx.bump_queue(session_id)
    return True


async def _drive(work: list[str], per_session: int, one: Callable[[str], Awaitable[bool]]) -> float:
    """Reservations/s of ``per_session`` reservations on each session, sessions in parallel."""

    async def worker(sid: str) -> None:
        for _ in range(per_session):
            if not await one(sid):
                raise RuntimeError(f"session {sid} ran out of entries")

    started = time.perf_counter()
    await within(asyncio.gather(*(worker(s) for s in work)), 600)
    return len(work) * per_session / (time.perf_counter() - started)


# -- baselines ----------------------------------------------------------------------------------
async def raw_asyncpg(url: str, work: list[str], per_session: int) -> float:
    pool = await asyncpg.create_pool(url, min_size=SESSIONS, max_size=SESSIONS)
    assert pool is not None
    try:

        async def one(sid: str) -> bool:
            async with pool.acquire() as conn, conn.transaction():
                if await conn.fetchval(_pg(LOCK), sid) is None:
                    return False
                view = await conn.fetchrow(_pg(VIEW), sid)
                if view[QUEUED] == 0 or view[AUTO_RUN] is False:
                    return False
                now = datetime.now(UTC)
                entry = await conn.fetchrow(_pg(RESERVE), now, OWNER, sid)
                if entry is None:
                    return False
                await conn.fetchval(
                    START_TURN_PG,
                    str(uuid.uuid4()),
                    sid,
                    entry["content"],
                    entry["source"],
                    now,
                    OWNER,
                    entry["id"],
                    "RUNNING",
                    None,  # client_message_id
                    None,  # entry_id
                )
                await conn.fetchval(_pg(BUMP_QUEUE), sid)
            return True

        return await _drive(work, per_session, one)
    finally:
        await pool.close()


def _sqlite_connect(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    for pragma in ("busy_timeout=30000", "synchronous=NORMAL", "foreign_keys=ON"):
        conn.execute(f"PRAGMA {pragma}")
    return conn


def _sqlite_reserver(conn: sqlite3.Connection) -> Callable[[str], bool]:
    """The Q3 transaction in hand-written SQL on one sqlite3 connection (synchronous)."""
    view_sql, reserve_sql = _sqlite(VIEW), _sqlite(RESERVE)
    insert_sql, consume_sql = _sqlite(INSERT_TURN), _sqlite(CONSUME)

    def one(sid: str) -> bool:
        conn.execute("BEGIN IMMEDIATE")
        try:
            view = conn.execute(view_sql, (sid,)).fetchone()
            now = datetime.now(UTC).replace(tzinfo=None).isoformat(sep=" ")
            entry = None
            if view is not None and view[QUEUED] > 0 and view[AUTO_RUN] != 0:
                entry = conn.execute(reserve_sql, (now, OWNER, sid)).fetchone()
            if entry is None:
                conn.execute("ROLLBACK")
                return False
            conn.execute(BUMP_SESSION, ("RUNNING", now, sid)).fetchone()
            turn = (str(uuid.uuid4()), sid, entry[2], entry[3], now, OWNER, None, None, sid)
            conn.execute(insert_sql, turn)
            conn.execute(consume_sql, (entry[0],))
            conn.execute(BUMP_QUEUE, (sid,)).fetchone()
            conn.execute("COMMIT")
            return True
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    return one


def raw_sqlite(path: Path, work: list[str], per_session: int) -> float:
    conn = _sqlite_connect(path)
    one = _sqlite_reserver(conn)
    try:
        started = time.perf_counter()
        for _ in range(per_session):  # round robin: one writer, the sessions take turns
            for sid in work:
                if not one(sid):
                    raise RuntimeError(f"session {sid} ran out of entries")
        return len(work) * per_session / (time.perf_counter() - started)
    finally:
        conn.close()


async def writer_thread(path: Path, work: list[str], per_session: int) -> float:
    """The same SQL, each transaction one call on a dedicated writer thread, from 8 asyncio
    tasks: what SQLite can do from asyncio with one thread hop per transaction."""
    conn = _sqlite_connect(path)
    one = _sqlite_reserver(conn)
    loop = asyncio.get_running_loop()
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="bench-writer") as writer:

        async def in_writer(sid: str) -> bool:
            return await loop.run_in_executor(writer, one, sid)

        try:
            return await _drive(work, per_session, in_writer)
        finally:
            conn.close()


# -- the benchmark ------------------------------------------------------------------------------
async def run(backend: Backend, cfg: Config) -> list[Row]:
    per_session = cfg.n(25, 200)
    sqlite = backend.name == "sqlite"
    ours: list[float] = []
    base: list[float] = []
    hop: list[float] = []  # SQLite only: the raw SQL as one writer-thread call per transaction
    async with backend.database() as url:
        path = Path(url.removeprefix("sqlite:///"))
        store = await open_store(Settings(database_url=url))
        try:
            for rep in range(cfg.reps):
                work = [await seed_sessions(url, SESSIONS, entries=per_session) for _ in "abc"]

                async def measure_ours(w: list[str] = work[0]) -> None:
                    ours.append(await _drive(w, per_session, lambda s: q3_store(store, s)))

                async def measure_base(w: list[str] = work[1]) -> None:
                    if sqlite:
                        base.append(raw_sqlite(path, w, per_session))
                    else:
                        base.append(await raw_asyncpg(url, w, per_session))

                async def measure_hop(w: list[str] = work[2]) -> None:
                    if sqlite:
                        hop.append(await writer_thread(path, w, per_session))

                steps = [measure_ours, measure_base, measure_hop]
                for step in steps if rep % 2 == 0 else steps[::-1]:
                    await step()
            if cfg.profile:
                await _profile(store, url, backend, cfg, per_session)
        finally:
            await store.close()
    driver = "raw sqlite3 (synchronous)" if sqlite else "raw asyncpg"
    rows = [
        Row(
            "P1",
            f"automatic reservations/s, {SESSIONS} sessions in parallel (vs {driver})",
            "/s",
            median(ours),
            median(base),
            "ratio>=",
            0.7,
        )
    ]
    if sqlite:
        rows.append(
            Row(
                "P1",
                "info: the same SQL with one thread hop per transaction, as a writer thread "
                "would run it (vs raw sqlite3); why turnqueue writes SQLite on the event loop",
                "/s",
                median(hop),
                median(base),
                "info",
            )
        )
    return rows


async def _profile(
    store: SqlStore, url: str, backend: Backend, cfg: Config, per_session: int
) -> None:
    from pyinstrument import Profiler

    work = await seed_sessions(url, SESSIONS, entries=per_session)
    profiler = Profiler(interval=0.0005, async_mode="disabled")
    profiler.start()
    await _drive(work, per_session, lambda s: q3_store(store, s))
    profiler.stop()
    target = cfg.out / "profiles" / f"P1-{backend.name}.txt"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(profiler.output_text(unicode=False, color=False))
