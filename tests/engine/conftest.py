"""Engine fixtures: an engine on the shared ``store`` database with the hand-driven agent."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from engine_helpers import ManualAgent
from event_loops import LoopFactory, loops_for
from faults import FaultyStore

from turnqueue.bus import EventBus
from turnqueue.engine import Engine
from turnqueue.settings import Settings
from turnqueue.store.sql import SqlStore, open_store

OpenEngine = Callable[..., Awaitable[Engine]]


def pytest_asyncio_loop_factories(config: Any, item: pytest.Item) -> dict[str, LoopFactory]:
    """The engine with real agent processes and with a dead instance's recovery also runs on
    uvloop, as ``turnqueue serve`` does (subprocesses, and LISTEN/NOTIFY on PostgreSQL)."""
    return dict(loops_for(item, only={"test_real_agents.py", "test_recovery.py"}))


@pytest.fixture
def agent() -> ManualAgent:
    return ManualAgent()


@pytest.fixture
def engine_settings(database_url: str) -> Settings:
    return Settings(
        database_url=database_url,
        cancel_timeout=0.5,
        escalation_timeout=0.3,
        cancel_operation_timeout=5,
        queue_max=10,
    )


@pytest.fixture
async def open_engine(engine_settings: Settings, agent: ManualAgent) -> AsyncIterator[OpenEngine]:
    """Open engines on the test database (several, e.g. to simulate a restart), each on a
    :class:`~faults.FaultyStore` (``faults_of(engine)``) for the tests that inject faults."""
    opened: list[tuple[Engine, SqlStore]] = []

    async def factory(
        settings: Settings | None = None, agent_: ManualAgent | None = None
    ) -> Engine:
        s = settings or engine_settings
        store = await open_store(s)
        a = agent_ or agent
        seam: Any = FaultyStore(store)  # a Store, by delegation
        engine = await Engine.open(s, seam, EventBus(64), agents={"scripted": a})  # type: ignore[dict-item]
        opened.append((engine, store))
        return engine

    yield factory
    for engine, store in reversed(opened):
        await engine.aclose()
        await store.close()


@pytest.fixture
async def engine(open_engine: OpenEngine) -> Engine:
    return await open_engine()
