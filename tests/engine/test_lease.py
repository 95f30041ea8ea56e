"""M6 on PostgreSQL: the instance lease does not depend on the connection pool. A heartbeat that
waited behind request traffic for a pooled connection would let the other instances declare a
busy (not dead) instance dead and take its turns."""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Any

import asyncpg  # type: ignore[import-untyped]
import pytest
from clients import poll

from turnqueue.settings import Settings
from turnqueue.store.notify import asyncpg_dsn


async def test_m6_heartbeats_go_on_while_the_pool_is_exhausted(
    database_url: str, engine_settings: Settings, open_engine: Any
) -> None:
    if not database_url.startswith("postgresql"):
        pytest.skip("leases exist only where several instances share a database (PostgreSQL)")
    pool_size = 2
    settings = engine_settings.model_copy(
        update={"db_pool_size": pool_size, "lease_seconds": 0.6, "db_timeout": 30.0}
    )
    engine = await open_engine(settings)
    store = engine.store
    observer = await asyncpg.connect(asyncpg_dsn(database_url))

    async def beat() -> datetime:
        value = await observer.fetchval(
            "SELECT heartbeat_at FROM instances WHERE id = $1", engine.core.instance
        )
        assert isinstance(value, datetime)
        return value

    # Request traffic takes every connection of the store's pool: transactions left open.
    release = asyncio.Event()
    taken = asyncio.Semaphore(0)

    async def hold() -> None:
        async with store.transaction():
            taken.release()
            await release.wait()

    holders = [asyncio.create_task(hold()) for _ in range(pool_size)]
    try:
        for _ in holders:
            await taken.acquire()
        pool = await store._pool(lease=False)  # the pool the transactions came from
        assert pool.get_size() == pool.get_max_size() == pool_size
        assert pool.get_idle_size() == 0  # exhausted: the next transaction would wait
        before = await beat()

        async def renewed() -> bool:
            return await beat() > before

        await poll(renewed, "a heartbeat while the pool is exhausted", timeout=10)
    finally:
        release.set()
        await asyncio.gather(*holders, return_exceptions=True)
        await observer.close()
