"""Shared fixtures: one fresh database per test, on SQLite and (when configured) PostgreSQL.

* ``database_url`` — parametrised ``sqlite`` / ``postgresql``: the plain URL of a fresh database
  already migrated to head. SQLite: a file in ``tmp_path``. PostgreSQL: only when
  ``TURNQUEUE_TEST_DATABASE_URL`` is set (e.g. ``postgresql://postgres@127.0.0.1:5432/test``);
  each test gets its own database cloned from a template migrated once per test session.
* ``empty_database_url`` — the same, but not migrated (migration tests).
* ``settings`` — ``Settings(database_url=database_url)``.
* ``store`` — an open :class:`~turnqueue.store.sql.SqlStore` on ``database_url``, closed after.

Any test that uses one of these runs twice (``[sqlite]`` and ``[postgresql]``, M3).

Parallel runs (pytest-xdist; ``TQ_TEST_WORKERS=2 ./tq test``, or ``-n 2``): each worker
has its own PostgreSQL template (named by its pid) and databases, ``tmp_path`` and free ports
(server starters retry a port another worker took first). The frontend tests' ``npm ci`` and
builds in the checkout take a file lock (``frontend_server.build_lock``). ``xdist_group`` and
``--dist loadgroup`` do not work with pytest 9.2 and xdist 3.8 (xdist sets ``item._nodeid``,
which pytest no longer reads).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import asyncpg  # type: ignore[import-untyped]
import pytest
from event_loops import LoopFactory, default_loops
from sqlalchemy.engine import make_url

from turnqueue.settings import Settings
from turnqueue.store.migrate import migrate
from turnqueue.store.sql import SqlStore, open_store

PG_ENV = "TURNQUEUE_TEST_DATABASE_URL"

# Server processes the tests start inherit this: their logs reach their files as they are
# written, so a failed test's report (below) shows what the servers saw up to the failure.
os.environ.setdefault("PYTHONUNBUFFERED", "1")

T = TypeVar("T")


def _run_sync(factory: Callable[[], Awaitable[T]]) -> T:
    """Run a coroutine to completion from sync code, even if a loop is running in this thread."""

    async def runner() -> T:
        return await factory()

    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, runner()).result()


def _pg_url(base: str, database: str) -> str:
    """``base`` with its database replaced, in the plain ``postgresql://`` form."""
    url = make_url(base).set(drivername="postgresql", database=database)
    return url.render_as_string(hide_password=False)


async def _admin(base: str, *statements: str) -> None:
    """Run statements outside a transaction on the admin database (CREATE/DROP DATABASE)."""
    conn = await asyncpg.connect(_pg_url(base, make_url(base).database or "postgres"))
    try:
        for statement in statements:
            await conn.execute(statement)
    finally:
        await conn.close()


@pytest.fixture(scope="session")
def pg_template() -> Iterator[tuple[str, str]]:
    """(admin URL, template database name), migrated once per test session and dropped after."""
    base = os.environ.get(PG_ENV)
    if not base:
        pytest.skip(f"{PG_ENV} not set: PostgreSQL half skipped")
    name = f"tq_template_{os.getpid()}"
    _run_sync(lambda: _admin(base, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    _run_sync(lambda: _admin(base, f'CREATE DATABASE "{name}"'))
    try:
        _run_sync(lambda: migrate(_pg_url(base, name)))
        yield base, name
    finally:
        _run_sync(lambda: _admin(base, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


async def _fresh_pg(request: pytest.FixtureRequest, *, migrated: bool) -> AsyncIterator[str]:
    base, template = request.getfixturevalue("pg_template")
    name = f"tq_{uuid.uuid4().hex[:16]}"
    source = template if migrated else "template0"
    await _admin(base, f'CREATE DATABASE "{name}" TEMPLATE "{source}"')
    try:
        yield _pg_url(base, name)
    finally:
        await _admin(base, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / f'tq_{uuid.uuid4().hex[:8]}.db'}"


@pytest.fixture(params=["sqlite", "postgresql"])
async def empty_database_url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    """A fresh, empty (unmigrated) database; ``[sqlite]`` and ``[postgresql]``."""
    if request.param == "sqlite":
        yield _sqlite_url(tmp_path)
        return
    async for url in _fresh_pg(request, migrated=False):
        yield url


@pytest.fixture(params=["sqlite", "postgresql"])
async def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    """A fresh database migrated to head; ``[sqlite]`` and ``[postgresql]``."""
    if request.param == "sqlite":
        url = _sqlite_url(tmp_path)
        await migrate(url)
        yield url
        return
    async for url in _fresh_pg(request, migrated=True):
        yield url


@pytest.fixture
def settings(database_url: str) -> Settings:
    return Settings(database_url=database_url)


@pytest.fixture
async def store(settings: Settings) -> AsyncIterator[SqlStore]:
    opened = await open_store(settings)
    try:
        yield opened
    finally:
        await opened.close()


@pytest.fixture
async def pg_database_url(request: pytest.FixtureRequest) -> AsyncIterator[str]:
    """A fresh PostgreSQL database migrated to head (multi-instance tests, M4); skipped
    without ``TURNQUEUE_TEST_DATABASE_URL``."""
    async for url in _fresh_pg(request, migrated=True):
        yield url


def pytest_asyncio_loop_factories(config: Any, item: pytest.Item) -> dict[str, LoopFactory]:
    """asyncio's loop, or uvloop for every test with ``TURNQUEUE_TEST_LOOP=uvloop``; conftests
    below may run theirs on both (tests/event_loops.py)."""
    return dict(default_loops(item))


#: How much of each server log a failed test's report shows (the end is what explains it).
LOG_TAIL_CHARS = 6000


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """A failed test that ran server processes (``*.log`` in its ``tmp_path``) shows the end
    of each log in its report: a CI failure of a multi-process test then says what the
    servers saw, not only what the client timed out on."""
    report = yield
    tmp_path = getattr(item, "funcargs", {}).get("tmp_path")
    if report.failed and isinstance(tmp_path, Path):
        for log in sorted(tmp_path.glob("*.log")):
            text = log.read_text(errors="replace")[-LOG_TAIL_CHARS:]
            report.sections.append((f"{log.name} (end)", text))
    return report


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Say plainly when the PostgreSQL half did not run."""
    if not os.environ.get(PG_ENV):
        skipped = len(terminalreporter.stats.get("skipped", []))
        terminalreporter.write_line(
            f"NOTE: {PG_ENV} is not set: the PostgreSQL half of the suite was skipped "
            f"({skipped} skipped). Set it (e.g. postgresql://postgres@127.0.0.1:5432/test) "
            "to run it.",
            yellow=True,
        )
