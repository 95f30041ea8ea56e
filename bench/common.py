"""Shared helpers: run configuration, result rows, fresh databases, seeding, a raw HTTP client and
the benchmark server subprocess. Every loop here is bounded in count and in time."""

from __future__ import annotations

import asyncio
import contextlib
import os
import statistics
import sys
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import asyncpg
from sqlalchemy import insert
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine

from turnqueue.store.drivers import create_engine_for_url
from turnqueue.store.migrate import migrate
from turnqueue.store.tables import queue_entries, queue_session_locks, sessions, tasks
from turnqueue.timeouts import within

PG_ENV = "TURNQUEUE_TEST_DATABASE_URL"
LOOPBACK = "127.0.0.1"
ROOT = Path(__file__).resolve().parent.parent
#: Upper bound of any single wait in the benchmarks (a hung server must not hang the run).
WAIT = 60.0


@dataclass(frozen=True, slots=True)
class Config:
    smoke: bool
    reps: int
    out: Path
    profile: bool
    workdir: Path
    label: str = ""  # appended to the results file name (e.g. "-before")

    def n(self, smoke: int, full: int) -> int:
        """A count: tiny in smoke mode, the real one otherwise."""
        return smoke if self.smoke else full


TargetKind = Literal["ratio>=", "ratio<=", "value<=", "value>=", "info"]


@dataclass(slots=True)
class Row:
    """One line of the results table. ``ratio`` is value / baseline, both from the same run."""

    id: str
    figure: str
    unit: str
    value: float | None
    baseline: float | None
    kind: TargetKind
    target: float | None = None
    note: str = ""

    @property
    def ratio(self) -> float | None:
        if self.value is None or not self.baseline:
            return None
        return self.value / self.baseline

    @property
    def target_text(self) -> str:
        if self.kind == "ratio>=":
            return f"≥ {self.target:g}×"
        if self.kind == "ratio<=":
            return f"≤ {self.target:g}×"
        if self.kind == "value<=":
            return f"≤ {self.target:g} {self.unit}"
        if self.kind == "value>=":
            return f"≥ {self.target:,g} {self.unit}"
        return "—"

    @property
    def met(self) -> bool | None:
        if self.kind == "info" or self.target is None:
            return None
        if self.kind == "value<=":
            return None if self.value is None else self.value <= self.target
        if self.kind == "value>=":
            return None if self.value is None else self.value >= self.target
        ratio = self.ratio
        if ratio is None:
            return None
        return ratio >= self.target if self.kind == "ratio>=" else ratio <= self.target


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values)) if values else float("nan")


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100)."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * len(ordered) + 0.5) - 1))
    return ordered[index]


def run_delay(pid: int) -> float:
    """Seconds the process's main thread (the server's event loop) has spent runnable but
    waiting for a CPU (``/proc/<pid>/schedstat``; NaN where unavailable). On a shared machine
    it tells latency caused by other work from latency the server caused itself."""
    try:
        return int(Path(f"/proc/{pid}/schedstat").read_text().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return float("nan")


# -- databases ----------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Backend:
    name: str  # "sqlite" | "postgresql"
    admin_url: str | None  # the PostgreSQL server to create databases on
    workdir: Path

    @contextlib.asynccontextmanager
    async def database(self, *, migrated: bool = True) -> AsyncIterator[str]:
        """A fresh database (plain URL), dropped afterwards."""
        tag = uuid.uuid4().hex[:12]
        if self.name == "sqlite":
            path = self.workdir / f"bench_{tag}.db"
            url = f"sqlite:///{path}"
            try:
                if migrated:
                    await migrate(url)
                yield url
            finally:
                for suffix in ("", "-wal", "-shm"):
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(f"{path}{suffix}")
            return
        assert self.admin_url is not None
        name = f"tqbench_{tag}"
        await pg_admin(self.admin_url, f'CREATE DATABASE "{name}"')
        try:
            url = pg_url(self.admin_url, name)
            if migrated:
                await migrate(url)
            yield url
        finally:
            await pg_admin(self.admin_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def backends(workdir: Path) -> list[Backend]:
    found = [Backend("sqlite", None, workdir)]
    admin = os.environ.get(PG_ENV)
    if admin:
        found.append(Backend("postgresql", admin, workdir))
    return found


def pg_url(base: str, database: str) -> str:
    url = make_url(base).set(drivername="postgresql", database=database)
    return url.render_as_string(hide_password=False)


async def pg_admin(base: str, *statements: str) -> None:
    """Statements outside a transaction on the admin database (CREATE/DROP DATABASE)."""
    conn = await asyncpg.connect(pg_url(base, make_url(base).database or "postgres"))
    try:
        for statement in statements:
            await conn.execute(statement)
    finally:
        await conn.close()


# -- seeding (bulk, straight into the tables: set-up is not what is measured) ---------------------
def _now() -> datetime:
    return datetime.now(UTC)


@contextlib.asynccontextmanager
async def bulk(url: str) -> AsyncIterator[AsyncEngine]:
    """An SQLAlchemy engine of its own for bulk set-up (the store has none on PostgreSQL)."""
    engine = create_engine_for_url(url)
    try:
        yield engine
    finally:
        await engine.dispose()


async def seed_sessions(
    url: str, count: int, *, entries: int = 0, owner: str = "local", batch: int = 5_000
) -> list[str]:
    """``count`` WAITING_FOR_INPUT sessions (task, session, lock row) with ``entries`` queued
    entries each; returns their ids."""
    ids: list[str] = []
    now = _now()
    for start in range(0, count, batch):
        chunk = [str(uuid.uuid4()) for _ in range(min(batch, count - start))]
        task_rows = [
            {
                "id": sid,
                "title": "bench",
                "owner": owner,
                "workflow_step": "IN_PROGRESS",
                "current_session_id": sid,
                "created_at": now,
            }
            for sid in chunk
        ]
        session_rows = [
            {
                "id": sid,
                "task_id": sid,
                "agent": "scripted",
                "state": "WAITING_FOR_INPUT",
                "revision": 1,
                "created_at": now,
                "updated_at": now,
            }
            for sid in chunk
        ]
        async with bulk(url) as engine, engine.begin() as conn:
            await conn.execute(insert(tasks), task_rows)
            await conn.execute(insert(sessions), session_rows)
            await conn.execute(
                insert(queue_session_locks), [{"session_id": s, "revision": 0} for s in chunk]
            )
        ids.extend(chunk)
        if entries:
            await _insert_entries(url, [(sid, i) for sid in chunk for i in range(1, entries + 1)])
    return ids


async def seed_entries(url: str, session_id: str, count: int) -> None:
    await _insert_entries(url, [(session_id, i) for i in range(1, count + 1)])


async def _insert_entries(url: str, where: list[tuple[str, int]]) -> None:
    """Queued entries at (session, position), inserted in batches."""
    now = _now()
    for start in range(0, len(where), 5_000):
        rows = [
            {
                "id": str(uuid.uuid4()),
                "session_id": sid,
                "position": position,
                "content": f"message {position}",
                "source": "USER",
                "queued_at": now,
                "in_flight": False,
            }
            for sid, position in where[start : start + 5_000]
        ]
        async with bulk(url) as engine, engine.begin() as conn:
            await conn.execute(insert(queue_entries), rows)


# -- a minimal keep-alive HTTP/1.1 client (httpx would cost more client CPU than the server) -----
class RawHttp:
    def __init__(self, port: int) -> None:
        self.port = port
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None

    async def __aenter__(self) -> RawHttp:
        self._reader, self._writer = await asyncio.open_connection(LOOPBACK, self.port)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._writer is not None:
            self._writer.close()
            with contextlib.suppress(Exception):
                await self._writer.wait_closed()

    async def post(self, path: str, body: bytes) -> tuple[int, bytes]:
        assert self._reader is not None and self._writer is not None
        head = (
            f"POST {path} HTTP/1.1\r\nHost: {LOOPBACK}:{self.port}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        )
        self._writer.write(head.encode() + body)
        return await within(self._response(), WAIT)

    async def _response(self) -> tuple[int, bytes]:
        assert self._reader is not None
        status = int((await self._reader.readline()).split()[1])
        length, chunked = 0, False
        for _ in range(100):  # bounded header count
            line = await self._reader.readline()
            if line in (b"\r\n", b""):
                break
            name, _, value = line.decode("latin-1").partition(":")
            if name.lower() == "content-length":
                length = int(value)
            elif name.lower() == "transfer-encoding" and "chunked" in value.lower():
                chunked = True
        if not chunked:
            return status, await self._reader.readexactly(length)
        parts: list[bytes] = []
        for _ in range(100_000):
            size = int((await self._reader.readline()).strip(), 16)
            data = await self._reader.readexactly(size + 2)
            if size == 0:
                break
            parts.append(data[:-2])
        return status, b"".join(parts)


async def post_json(port: int, path: str, body: bytes) -> tuple[int, bytes]:
    async with RawHttp(port) as http:
        return await http.post(path, body)


# -- the benchmark server, in a subprocess so that its CPU and RSS are its own -------------------
class ServerProcess:
    """``python -m bench.server --db URL``: turnqueue plus the baseline routes (bench/server.py)."""

    def __init__(self, database_url: str, env: dict[str, str] | None = None) -> None:
        self.database_url = database_url
        self.env = env  # added to this process's environment (e.g. TURNQUEUE_… settings)
        self.proc: asyncio.subprocess.Process | None = None
        self.port = 0

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    async def __aenter__(self) -> ServerProcess:
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "bench.server",
            "--db",
            self.database_url,
            stdout=asyncio.subprocess.PIPE,
            cwd=ROOT,
            env={**os.environ, **self.env} if self.env else None,
        )
        assert self.proc.stdout is not None
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline:
            line = await within(self.proc.stdout.readline(), WAIT)
            if not line:
                raise RuntimeError("the bench server exited during start-up")
            if line.startswith(b"PORT "):
                self.port = int(line.split()[1])
                return self
        raise RuntimeError("the bench server did not start in time")

    async def __aexit__(self, *exc: object) -> None:
        if self.proc is None or self.proc.returncode is not None:
            return
        self.proc.terminate()
        try:
            await within(self.proc.wait(), 30)
        except TimeoutError:
            self.proc.kill()
            await self.proc.wait()

    async def call(self, path: str, body: bytes = b"{}") -> Any:
        import json

        status, data = await post_json(self.port, path, body)
        if status != 200:
            raise RuntimeError(f"{path} answered {status}: {data[:300]!r}")
        return json.loads(data)
