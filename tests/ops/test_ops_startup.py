"""What ``turnqueue serve`` says and offers when it starts (issue 26; A1, M1, M2), in the real
server process (``python -m turnqueue serve``), on SQLite and PostgreSQL."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
from ops_helpers import ProcServer

Start = Callable[..., Awaitable[ProcServer]]


@pytest.fixture
async def start(database_url: str, tmp_path: Path) -> AsyncIterator[Start]:
    started: list[ProcServer] = []

    async def run(**env: str) -> ProcServer:
        log = tmp_path / f"server{len(started)}.log"
        server = ProcServer(database_url, log, **{"TURNQUEUE_AGENT_COMMAND": "", **env})
        started.append(server)
        return await server.start()

    yield run
    for server in started:
        server.stop()


async def test_a1_served_agents_lists_command_only_with_a_command(start: Start) -> None:
    """A1: without ``TURNQUEUE_AGENT_COMMAND``, ``agents`` does not list ``command`` and
    ``createTask(agent: "command")`` is refused ``INVALID_INPUT`` saying what is missing, creating
    nothing; with it, ``command`` is listed and accepted."""
    bare = await start()
    async with bare.client() as client:
        listed = await client.data("{ agents { name type } }")
        assert listed["agents"] == [{"name": "scripted", "type": "SCRIPTED"}]
        refused = await client.mutate("createTask", "task { id }", title="x", agent="command")
        assert refused["task"] is None
        [error] = refused["userErrors"]
        assert error["code"] == "INVALID_INPUT" and "TURNQUEUE_AGENT_COMMAND" in error["message"]
        tasks = await client.data("{ tasksConnection(first: 5) { edges { node { id } } } }")
        assert tasks["tasksConnection"]["edges"] == []
    bare.stop()

    configured = await start(TURNQUEUE_AGENT_COMMAND="cat")
    async with configured.client() as client:
        listed = await client.data("{ agents { name type } }")
        assert {"name": "command", "type": "COMMAND"} in listed["agents"]
        await client.ok("createTask", "task { id }", title="x", agent="command")


def test_a1_serve_refuses_a_default_agent_that_cannot_run(tmp_path: Path) -> None:
    """A1/M2: ``TURNQUEUE_AGENT=command`` without a command stops ``serve`` at once (exit 2),
    saying what is missing, instead of failing every first turn."""
    done = subprocess.run(
        [sys.executable, "-m", "turnqueue", "serve", "--agent", "command", "--port", "1"],
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "TURNQUEUE_DATABASE_URL": f"sqlite:///{tmp_path}/t.db"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert "TURNQUEUE_AGENT_COMMAND" in done.stderr
    assert not (tmp_path / "t.db").exists()  # stopped before anything was opened


def with_password(url: str) -> str:
    """``url`` with a password added (PostgreSQL; this test server trusts local connections)."""
    return url.replace("postgresql://postgres@", f"postgresql://postgres:{SECRET}@", 1)


SECRET = "hunter2-never-printed"


async def test_m1_a_clean_start_prints_what_a_user_needs(
    database_url: str, tmp_path: Path, start: Start
) -> None:
    """Issue 26: the start says where it listens, the page's and GraphiQL's URLs, the store
    (without its password) and the agents; no alembic or uvicorn start-up chatter."""
    server = await start(TURNQUEUE_DATABASE_URL=with_password(database_url))
    log = server.log_text()
    base = f"http://127.0.0.1:{server.port}"
    assert f"turnqueue is ready on {base} (Ctrl-C stops it)" in log
    assert f"  GraphiQL  {base}/graphql" in log
    assert "  agents    scripted (the default); command: set TURNQUEUE_AGENT_COMMAND" in log
    assert "  access    no token: one local user, this machine only" in log
    if database_url.startswith("sqlite"):
        assert f"  store     SQLite {database_url.removeprefix('sqlite:///')}" in log
    else:
        database = database_url.rsplit("/", 1)[1]
        assert f"  store     PostgreSQL postgres@127.0.0.1:5432/{database}" in log
    assert SECRET not in log
    for chatter in ("alembic", "setup plugin", "Uvicorn running", "Started server process"):
        assert chatter not in log, chatter
    assert "warning" not in log.lower()


async def test_m1_a_start_without_the_front_ends_says_how_to_get_them(
    tmp_path: Path, start: Start
) -> None:
    """Without a built page or GraphiQL the server starts and says how to build them."""
    missing = str(tmp_path / "not-built")
    server = await start(TURNQUEUE_WEB_DIST=missing, TURNQUEUE_GRAPHIQL_DIST=missing)
    log = server.log_text()
    assert "  web page  not built: ./tq serve builds it when Node.js 20.19+ and npm" in log
    assert "npm ci && npm run build, in frontend_examples/web" in log
    assert "(not built: Strawberry's page, from a CDN, needs internet access" in log
