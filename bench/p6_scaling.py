"""P6: how the Q3 reservation's cost grows: 10 vs 10,000 entries in the queue, and 10 vs
100,000 sessions in the database (smaller in smoke mode). Ratio = large / small; target ≤ 1.3×.

One reservation at a time (no contention), each timed alone: the Q3 transaction of P1 through
the store. Between two timed reservations, untimed upkeep keeps the case constant: the turn just
started is marked COMPLETED and one entry is appended at the tail.
"""

from __future__ import annotations

import time

from sqlalchemy import update
from sqlalchemy.ext.asyncio import AsyncEngine

from bench.common import Backend, Config, Row, bulk, median, seed_entries, seed_sessions
from bench.p1_reservation import q3_store
from turnqueue.domain import MessageSource
from turnqueue.settings import Settings
from turnqueue.store.sql import SqlStore, open_store
from turnqueue.store.tables import turns

SMALL = 10


async def _per_op_seconds(store: SqlStore, url: str, session_id: str, ops: int) -> float:
    """Median seconds of one reservation on ``session_id`` over ``ops`` reservations."""
    async with bulk(url) as engine:  # the untimed upkeep's
        return await _timed(store, engine, session_id, ops)


async def _timed(store: SqlStore, engine: AsyncEngine, session_id: str, ops: int) -> float:
    times: list[float] = []
    for _ in range(ops):
        started = time.perf_counter()
        if not await q3_store(store, session_id):
            raise RuntimeError("nothing to reserve")
        times.append(time.perf_counter() - started)
        async with store.transaction() as tx:  # untimed upkeep
            await tx.add_entry(session_id, content="refill", source=MessageSource.USER)
        async with engine.begin() as conn:
            await conn.execute(
                update(turns).where(turns.c.session_id == session_id).values(status="COMPLETED")
            )
    return median(times)


async def run(backend: Backend, cfg: Config) -> list[Row]:
    ops = cfg.n(20, 150)
    many_entries = cfg.n(1_000, 10_000)
    many_sessions = cfg.n(2_000, 100_000)
    rows: list[Row] = []

    # Entries: two sessions in one database, measured alternately.
    small_e: list[float] = []
    large_e: list[float] = []
    async with backend.database() as url:
        store = await open_store(Settings(database_url=url))
        try:
            small, large = await seed_sessions(url, 2)
            await seed_entries(url, small, SMALL)
            await seed_entries(url, large, many_entries)
            await _per_op_seconds(store, url, small, 5)  # warm-up (statement caches)
            for _ in range(cfg.reps):
                small_e.append(await _per_op_seconds(store, url, small, ops))
                large_e.append(await _per_op_seconds(store, url, large, ops))
        finally:
            await store.close()
    rows.append(
        Row(
            "P6",
            f"one reservation, {many_entries:,} vs {SMALL} entries in the queue",
            "µs",
            median(large_e) * 1e6,
            median(small_e) * 1e6,
            "ratio<=",
            1.3,
        )
    )

    # Sessions: two databases, 10 sessions and many sessions (each with one queued entry).
    small_s: list[float] = []
    large_s: list[float] = []
    async with backend.database() as small_url, backend.database() as large_url:
        small_store = await open_store(Settings(database_url=small_url))
        large_store = await open_store(Settings(database_url=large_url))
        try:
            targets = []
            cases = ((small_store, small_url, SMALL), (large_store, large_url, many_sessions))
            for store, url, count in cases:
                ids = await seed_sessions(url, count - 1, entries=1)
                (target,) = await seed_sessions(url, 1, entries=SMALL)
                del ids
                await _per_op_seconds(store, url, target, 5)
                targets.append(target)
            for _ in range(cfg.reps):
                small_s.append(await _per_op_seconds(small_store, small_url, targets[0], ops))
                large_s.append(await _per_op_seconds(large_store, large_url, targets[1], ops))
        finally:
            await small_store.close()
            await large_store.close()
    rows.append(
        Row(
            "P6",
            f"one reservation, {many_sessions:,} vs {SMALL} sessions in the database",
            "µs",
            median(large_s) * 1e6,
            median(small_s) * 1e6,
            "ratio<=",
            1.3,
        )
    )
    return rows
