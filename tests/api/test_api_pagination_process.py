"""G3 against the product as it runs: ``python -m turnqueue serve`` in its own process (uvicorn's
default loop, real sockets, tokens on), paged over HTTP with httpx, ``[sqlite]`` and
``[postgresql]``. Two principals: each pages through its own tasks only (S2), while the other
keeps creating tasks between the page reads.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from clients import TLS, Client, free_port

REPO = Path(__file__).resolve().parents[2]
TASKS = """query($after: String) { tasksConnection(first: 2, after: $after) {
  edges { cursor node { id title } } pageInfo { hasNextPage endCursor } } }"""


@pytest.fixture
async def served(database_url: str, tmp_path: Path) -> AsyncIterator[str]:
    """The base URL of a ``turnqueue serve`` process on ``database_url``; stopped after."""
    port = free_port()
    env = {
        **os.environ,
        "TURNQUEUE_DATABASE_URL": database_url,
        "TURNQUEUE_HOST": "127.0.0.1",
        "TURNQUEUE_PORT": str(port),
        "TURNQUEUE_TOKENS": "alice:tok-a,bob:tok-b",
    }
    log_path = tmp_path / "server.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(  # noqa: ASYNC220 (returns at once)
            [sys.executable, "-m", "turnqueue", "serve"],
            env=env,
            cwd=REPO,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        async with httpx.AsyncClient(timeout=2, verify=TLS) as http:
            for _ in range(300):  # bounded: up to ~30 s to become ready
                if process.poll() is not None:
                    raise RuntimeError(f"server exited: {log_path.read_text()[-3000:]}")
                with contextlib.suppress(httpx.TransportError):
                    if (await http.get(f"{base}/readyz")).is_success:
                        break
                await asyncio.sleep(0.1)
            else:
                raise RuntimeError("server did not become ready")
        yield base
    finally:
        process.terminate()
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)


async def create(client: Client, title: str) -> str:
    payload = await client.ok("createTask", "task { id }", title=title)
    task_id: str = payload["task"]["id"]
    return task_id


async def test_g3_served_process_pages_tasks_over_http(served: str) -> None:
    async with Client(served, "tok-a") as alice, Client(served, "tok-b") as bob:
        mine = [await create(alice, f"a{i}") for i in range(5)]
        theirs = [await create(bob, "b0")]
        seen: list[str] = []
        after: str | None = None
        while True:
            page: dict[str, Any] = (await alice.data(TASKS, after=after))["tasksConnection"]
            seen += [edge["node"]["id"] for edge in page["edges"]]
            theirs.append(await create(bob, f"b{len(theirs)}"))  # between two page reads
            if not page["pageInfo"]["hasNextPage"]:
                break
            after = page["pageInfo"]["endCursor"]
        assert seen == list(reversed(mine))  # newest first, each once, none of bob's
        bob_page = (await bob.data(TASKS, after=None))["tasksConnection"]
        assert {e["node"]["id"] for e in bob_page["edges"]} <= set(theirs)
        # A bad argument over HTTP: GraphQL JSON with the error, not an HTTP error page.
        body = await alice.gql(TASKS, after="garbage")
        assert body["data"] is None
        assert body["errors"][0]["extensions"]["code"] == "INVALID_INPUT"
