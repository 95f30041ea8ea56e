"""P2: turns/s end to end with a zero-time agent, 100 sessions in parallel.

Ours: the real ``Engine`` (in process, no HTTP) with a tiny agent whose runs complete at once.
Each session enqueues its messages one after the other (``Engine.enqueue``); the first starts a
turn, the rest queue, and every turn's end reserves and starts the next (Q3, Q4): enqueue →
reserve → turn → complete → next. Timed until the last turn's end has committed.

Baseline (PostgreSQL only; SQLite has no counterpart): procrastinate 3 on the same PostgreSQL
server (its own fresh database): the same number of no-op jobs deferred by 100 concurrent
producers, then run by a worker with concurrency 8 until the queue is empty.
"""

from __future__ import annotations

import asyncio
import time

from bench.common import Backend, Config, Row, median
from turnqueue.agents.base import AgentResult, BaseRun, RunSet, Signal
from turnqueue.bus import Event, EventBus, EventKind
from turnqueue.engine import Engine
from turnqueue.settings import Settings
from turnqueue.store.sql import open_store
from turnqueue.timeouts import within

SESSIONS = 100
PRINCIPAL = "bench"


class ZeroRun(BaseRun):
    async def _run(self) -> AgentResult:
        self._emit("ok")
        return AgentResult(ok=True)

    async def signal(self, signal: Signal) -> None:
        return None


class ZeroAgent:
    """An agent whose every run completes immediately with the output ``ok``."""

    name = "scripted"

    def __init__(self) -> None:
        self._runs = RunSet()

    async def start(self, prompt: str, *, session_id: str, turn_id: str) -> ZeroRun:
        run = ZeroRun(f"zero-{turn_id}")
        run.launch()
        self._runs.add(run)
        return run

    async def aclose(self) -> None:
        await self._runs.aclose()


async def _turnqueue_rate(engine: Engine, per_session: int) -> float:
    sessions = [
        (await engine.create_task(PRINCIPAL, f"p2 {i}", None))[1].id for i in range(SESSIONS)
    ]
    wanted = set(sessions)
    target = SESSIONS * per_session
    ended = 0
    all_done = asyncio.Event()

    def on_event(event: Event) -> None:  # the final output chunk is published after the end
        nonlocal ended
        chunk = event.chunk
        if event.kind is EventKind.OUTPUT and chunk is not None and chunk.done:
            if chunk.session_id in wanted:
                ended += 1
                if ended >= target:
                    all_done.set()

    engine.bus.add_listener(on_event)

    async def producer(sid: str) -> None:
        for k in range(per_session):
            await engine.enqueue(PRINCIPAL, sid, f"message {k}", None)

    started = time.perf_counter()
    await within(asyncio.gather(*(producer(s) for s in sessions)), 600)
    await within(all_done.wait(), 600)
    elapsed = time.perf_counter() - started
    engine.bus._listeners.remove(on_event)  # the bus has no public removal; bench-only
    return target / elapsed


async def _procrastinate_rate(url: str, jobs_per_producer: int) -> float:
    import procrastinate

    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=url))

    @app.task(name="noop")
    async def noop() -> None:
        return None

    async with app.open_async():
        await app.schema_manager.apply_schema_async()

        async def producer() -> None:
            for _ in range(jobs_per_producer):
                await noop.defer_async()

        started = time.perf_counter()
        await within(asyncio.gather(*(producer() for _ in range(SESSIONS))), 600)
        await within(
            app.run_worker_async(
                concurrency=8, wait=False, install_signal_handlers=False, listen_notify=False
            ),
            600,
        )
        elapsed = time.perf_counter() - started
        done = list(await app.job_manager.list_jobs_async(status="succeeded"))
        if len(done) != SESSIONS * jobs_per_producer:
            raise RuntimeError(f"procrastinate ran {len(done)} jobs")
    return SESSIONS * jobs_per_producer / elapsed


async def run(backend: Backend, cfg: Config) -> list[Row]:
    per_session = cfg.n(1, 10)
    ours: list[float] = []
    base: list[float] = []
    async with backend.database() as url:
        settings = Settings(database_url=url, queue_max=0, scripted_turn_seconds=0)
        store = await open_store(settings)
        engine = await Engine.open(settings, store, EventBus(), agents={"scripted": ZeroAgent()})
        try:
            for _ in range(cfg.reps):
                ours.append(await _turnqueue_rate(engine, per_session))
                if backend.name == "postgresql":
                    async with backend.database(migrated=False) as other:
                        base.append(await _procrastinate_rate(other, per_session))
        finally:
            await engine.aclose()
            await store.close()
    note = "" if base else "no baseline on SQLite: procrastinate needs PostgreSQL"
    return [
        Row(
            "P2",
            f"turns/s end to end, zero-time agent, {SESSIONS} sessions "
            "(vs procrastinate no-op jobs)",
            "/s",
            median(ours),
            median(base) if base else None,
            "ratio>=",
            1.0,
            note,
        )
    ]
