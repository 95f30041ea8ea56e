"""M6 on PostgreSQL: the instance lease does not depend on the connection pool. A heartbeat that
waited behind request traffic for a pooled connection would let the other instances declare a
busy (not dead) instance dead and take its turns."""

from __future__ import annotations

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
    settings = engine_settings.model_copy(
        update={"db_pool_size": 1, "lease_seconds": 0.6, "db_timeout": 30.0}
    )
    engine = await open_engine(settings)
    observer = await asyncpg.connect(asyncpg_dsn(database_url))

    async def beat() -> datetime:
        value = await observer.fetchval(
            "SELECT heartbeat_at FROM instances WHERE id = $1", engine.core.instance
        )
        assert isinstance(value, datetime)
        return value

    pool = engine.store.engine.pool  # type: ignore[attr-defined]
    held: list[Any] = []
    try:
        for _ in range(2):  # pool_size 1 + max_overflow 1: every pooled connection is taken
            conn = await engine.store.engine.connect()  # type: ignore[attr-defined]
            await conn.begin()
            held.append(conn)
        assert pool.checkedout() == 2 and pool.overflow() == 1
        before = await beat()

        async def renewed() -> bool:
            return await beat() > before

        await poll(renewed, "a heartbeat while the pool is exhausted", timeout=10)
    finally:
        for conn in held:
            await conn.rollback()
            await conn.close()
        await observer.close()
