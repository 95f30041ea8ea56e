"""API fixtures: a REAL uvicorn server on a free port, in-process, on the shared ``database_url``
(``[sqlite]`` and ``[postgresql]``), with HTTP (httpx) and graphql-transport-ws (gql) clients.

Agents: ``scripted`` answers in 0.2 s; ``slow`` takes 30 s, so a session using it stays RUNNING
until the test cancels it — busy states without sleeping.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
import uvicorn
from api_helpers import Api, ApiFactory
from event_loops import LoopFactory, loops_for

from turnqueue.agents.scripted import ScriptedAgent
from turnqueue.app import create_app
from turnqueue.settings import Settings
from turnqueue.timeouts import within

TOKENS = {"alice": "tok-a", "bob": "tok-b"}


def pytest_asyncio_loop_factories(config: Any, item: pytest.Item) -> dict[str, LoopFactory]:
    """The WebSocket transport tests also run on uvloop, as ``turnqueue serve`` does."""
    return dict(loops_for(item, only={"test_api_subscriptions.py", "test_api_fanout.py"}))


@pytest.fixture
async def start_api(database_url: str) -> AsyncIterator[ApiFactory]:
    """Start servers with Settings overrides; every one is shut down in teardown."""
    running: list[tuple[uvicorn.Server, asyncio.Task[None], Api]] = []

    async def start(**overrides: Any) -> Api:
        values: dict[str, Any] = {
            "database_url": database_url,
            "tokens": TOKENS,
            "scripted_turn_seconds": 0.2,
            "cancel_timeout": 1.0,
            "escalation_timeout": 0.5,
        }
        values.update(overrides)
        settings = Settings(**values)
        agents = {
            "scripted": ScriptedAgent(settings.scripted_turn_seconds),
            "slow": ScriptedAgent(30.0),
        }
        app = create_app(settings, agents=agents)
        config = uvicorn.Config(
            app,
            host="127.0.0.1",
            port=0,
            ws="auto",
            lifespan="on",
            log_level="warning",
        )
        server = uvicorn.Server(config)
        task = asyncio.create_task(server.serve())
        while not server.started:
            if task.done():
                task.result()  # re-raise the start-up failure
                raise RuntimeError("server exited during start-up")
            await asyncio.sleep(0.01)
        port = server.servers[0].sockets[0].getsockname()[1]
        api = Api(f"http://127.0.0.1:{port}", settings, app)
        running.append((server, task, api))
        return api

    yield start
    for server, task, api in reversed(running):
        await api.http.aclose()
        server.should_exit = True
        await within(task, 30)


@pytest.fixture
async def api(start_api: ApiFactory) -> Api:
    return await start_api()
