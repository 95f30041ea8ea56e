"""P9: the cost of the durable output log (O1) against the in-memory path, in the same run.

* Turn throughput: P2's workload (100 sessions, zero-time agent, one chunk per turn) with the
  log, against the same engine whose runners keep output in memory only (no ``turn_output``
  rows; chunks published as they arrive). Ratio log / memory, target ≥ 0.9; and the process
  CPU per turn of each (memory / log). Each run on a fresh database, :data:`PAIRS` log/memory
  pairs per repetition (one pair's ratio moves ±0.1 between runs on a busy machine).
* A streaming turn's CPU: one turn streaming ``CHUNKS`` chunks (``BURST`` chunks every
  millisecond, as a fast model streams tokens) with a bus subscriber reading them; process CPU
  time (``time.process_time``: the event loop, SQLite's writes, asyncpg's client side; not the
  PostgreSQL server's) from the first chunk to the end's ``done``. Ratio memory / log, so the
  target reads ≥ 0.9 like the first (the log costs at most ~10 %).
* The flush interval: the same streaming turn with 1, 5 and 20 ms (``info`` rows): CPU and
  the number of committed batches, which is how FLUSH_SECONDS was chosen.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from bench.common import Backend, Config, Row, median
from bench.p2_turns import SESSIONS, ZeroAgent, _turnqueue_rate
from turnqueue.agents.base import AgentResult, BaseRun, RunSet, Signal
from turnqueue.bus import Event, EventBus, EventKind
from turnqueue.domain import ItemKind, OutputChunk, Turn, TurnItem, TurnStatus
from turnqueue.engine import Engine, outputlog, turns
from turnqueue.engine.outputlog import MAX_OUTPUT_CHARS
from turnqueue.engine.runner import TurnRunner
from turnqueue.settings import Settings
from turnqueue.store.sql import open_store
from turnqueue.timeouts import within

PRINCIPAL = "bench"
CHUNKS = 4000
BURST = 4
CHUNK = "token-ish text "
SPARSE_CHUNKS = 5
SPARSE_GAP = 0.016
#: Log/memory pairs of the throughput rows per repetition.
PAIRS = 3


class MemoryLog:
    """The path before O1, in place of a runner's :class:`~turnqueue.engine.outputlog.OutputLog`:
    text chunks are published as they arrive and nothing is logged."""

    def __init__(self, turn: Turn, bus: EventBus) -> None:
        self.turn = turn
        self._bus = bus
        self._parts: list[str] = []
        self._length = 0
        self.detached = False

    @property
    def text(self) -> str:
        return "".join(self._parts)

    committed_text = text

    def add(self, item: str | TurnItem) -> None:
        if isinstance(item, TurnItem):  # the in-memory path streams text only
            if item.kind is not ItemKind.MESSAGE:
                return
            item = str(item.data.get("text", ""))
        if not item:
            return
        offset = self._length
        self._length += len(item)
        if offset < MAX_OUTPUT_CHARS:
            self._parts.append(item[: MAX_OUTPUT_CHARS - offset])
        sid = self.turn.session_id
        chunk = OutputChunk(sid, self.turn.id, offset, item, False, TurnStatus.RUNNING)
        self._bus.publish(Event(EventKind.OUTPUT, sid, chunk=chunk))

    async def detach(self) -> None:
        self.detached = True

    async def write_rest(self, tx: Any) -> None:
        pass


class InMemoryRunner(TurnRunner):
    """The path before O1: nothing is logged."""

    def __init__(self, turn: Turn, agent: Any, bus: EventBus, store: Any) -> None:
        super().__init__(turn, agent, bus, store)
        self.log = MemoryLog(turn, bus)  # type: ignore[assignment]


@contextmanager
def in_memory(enabled: bool) -> Iterator[None]:
    original = turns.TurnRunner
    if enabled:
        turns.TurnRunner = InMemoryRunner  # type: ignore[misc]
    try:
        yield
    finally:
        turns.TurnRunner = original  # type: ignore[misc]


@contextmanager
def flush_seconds(value: float) -> Iterator[None]:
    original = outputlog.FLUSH_SECONDS
    outputlog.FLUSH_SECONDS = value
    try:
        yield
    finally:
        outputlog.FLUSH_SECONDS = original


class StreamingRun(BaseRun):
    async def _run(self) -> AgentResult:
        for _burst in range(0, CHUNKS, BURST):
            for _ in range(BURST):
                self._emit(CHUNK)
            await asyncio.sleep(0.001)
        return AgentResult(ok=True)

    async def signal(self, signal: Signal) -> None:
        return None


class SparseRun(BaseRun):
    """The scripted agent's shape: 5 chunks, 16 ms apart (each alone in its batch)."""

    async def _run(self) -> AgentResult:
        for _ in range(SPARSE_CHUNKS):
            self._emit(CHUNK)
            await asyncio.sleep(SPARSE_GAP)
        return AgentResult(ok=True)

    async def signal(self, signal: Signal) -> None:
        return None


class StreamingAgent:
    name = "scripted"

    def __init__(self, run_class: type[BaseRun] = StreamingRun) -> None:
        self._runs = RunSet()
        self._class = run_class

    async def start(self, prompt: str, *, session_id: str, turn_id: str) -> BaseRun:
        run = self._class(f"stream-{turn_id}")
        run.launch()
        self._runs.add(run)
        return run

    async def aclose(self) -> None:
        await self._runs.aclose()


async def _streaming_cpu(engine: Engine) -> tuple[float, int]:
    """CPU seconds of one streaming turn, and how many chunks its subscriber received."""
    _, session = await engine.create_task(PRINCIPAL, "p7", None)
    sub = engine.bus.subscribe(session.id, [EventKind.OUTPUT])
    received = 0
    try:
        cpu = time.process_time()
        await engine.send_message(PRINCIPAL, session.id, "stream")
        while True:
            event = await within(sub.get(), 60)
            if event.chunk is None:
                continue
            received += 1
            if event.chunk.done:
                expected = CHUNKS * len(CHUNK)
                if event.chunk.offset != expected:
                    raise RuntimeError(f"streamed {event.chunk.offset} of {expected} chars")
                break
        return time.process_time() - cpu, received - 1
    finally:
        sub.close()


def _spread(runs: dict[bool, list[tuple[float, float]]], index: int) -> str:
    """The range of the pairs' own ratios (log / memory, or memory / log for CPU)."""
    if index == 0:
        ratios = [log[0] / mem[0] for log, mem in zip(runs[False], runs[True], strict=True)]
    else:
        ratios = [mem[1] / log[1] for log, mem in zip(runs[False], runs[True], strict=True)]
    return f"pairs {min(ratios):.2f}–{max(ratios):.2f}×"


def _pair_rows(label: str, runs: dict[bool, list[tuple[float, float]]], note: str) -> list[Row]:
    """The throughput row (log / memory) and the CPU-per-turn row (memory / log) of paired runs."""
    rate = {memory: median([r for r, _ in runs[memory]]) for memory in (False, True)}
    cpu = {memory: median([c for _, c in runs[memory]]) for memory in (False, True)}
    return [
        Row(
            "P9",
            f"turns/s with the output log vs in memory ({label})",
            "/s",
            rate[False],
            rate[True],
            "ratio>=",
            0.9,
            f"{note}; {_spread(runs, 0)}",
        ),
        Row(
            "P9",
            f"CPU µs per turn, {label}: in memory vs with the log (ratio = memory / log)",
            "µs",
            cpu[True],
            cpu[False],
            "ratio>=",
            0.9,
            f"with the log {cpu[False]:.0f} µs; {_spread(runs, 1)}",
        ),
    ]


async def _with_engine(url: str, agent: Any, work: Any) -> Any:
    settings = Settings(database_url=url, queue_max=0, scripted_turn_seconds=0)
    store = await open_store(settings)
    engine = await Engine.open(settings, store, EventBus(100_000), agents={"scripted": agent})
    try:
        return await work(engine)
    finally:
        await engine.aclose()
        await store.close()


async def _rate_and_cpu(engine: Engine, per_session: int) -> tuple[float, float]:
    """Turns/s, and process CPU µs per turn (the run's session creation included)."""
    cpu = time.process_time()
    rate = await _turnqueue_rate(engine, per_session)
    return rate, (time.process_time() - cpu) / (SESSIONS * per_session) * 1e6


async def run(backend: Backend, cfg: Config) -> list[Row]:
    per_session = cfg.n(1, 10)
    # Throughput: log and memory back to back, each on a fresh database (a database both grow
    # drifts under the later runs), in the other order each pair; PAIRS per repetition, since
    # one pair's ratio moved ±0.1 between runs on the shared 2-core machine.
    pairs = cfg.reps * cfg.n(1, PAIRS)
    rates: dict[bool, list[tuple[float, float]]] = {True: [], False: []}
    sparse: dict[bool, list[tuple[float, float]]] = {True: [], False: []}
    cpus: dict[bool, list[float]] = {True: [], False: []}
    sweep: dict[float, list[tuple[float, int]]] = {0.001: [], 0.005: [], 0.02: []}
    for memory in (False, True):  # warm-up, not measured: the first engine compiles plans
        with in_memory(memory):
            async with backend.database() as url:
                await _with_engine(url, ZeroAgent(), lambda e: _rate_and_cpu(e, 1))
    for pair in range(pairs):
        for memory in (False, True) if pair % 2 == 0 else (True, False):
            with in_memory(memory):
                async with backend.database() as url:
                    rates[memory].append(
                        await _with_engine(
                            url, ZeroAgent(), lambda e: _rate_and_cpu(e, per_session)
                        )
                    )
                async with backend.database() as url:
                    sparse[memory].append(
                        await _with_engine(
                            url,
                            StreamingAgent(SparseRun),
                            lambda e: _rate_and_cpu(e, cfg.n(1, 3)),
                        )
                    )
    async with backend.database() as url:
        for rep in range(cfg.reps):
            for memory in (False, True) if rep % 2 == 0 else (True, False):
                with in_memory(memory):
                    cpu, _ = await _with_engine(url, StreamingAgent(), _streaming_cpu)
                    cpus[memory].append(cpu)
            for seconds in sweep:
                with flush_seconds(seconds):
                    sweep[seconds].append(await _with_engine(url, StreamingAgent(), _streaming_cpu))
    sparse_label = (
        f"{SPARSE_CHUNKS} chunks {SPARSE_GAP * 1000:g} ms apart per turn, {SESSIONS} sessions"
    )
    rows = [
        *_pair_rows(f"P2 workload, {SESSIONS} sessions", rates, f"medians of {pairs} pairs"),
        *_pair_rows(
            sparse_label,
            sparse,
            "with the log each chunk waits for the shared flush (all turns, one transaction)",
        ),
        Row(
            "P9",
            f"CPU of a turn streaming {CHUNKS} chunks: in memory vs with the log "
            "(ratio = memory / log)",
            "s",
            median(cpus[True]),
            median(cpus[False]),
            "ratio>=",
            0.9,
            f"with the log {median(cpus[False]):.3f} s, in memory {median(cpus[True]):.3f} s",
        ),
    ]
    for seconds, results in sweep.items():
        rows.append(
            Row(
                "P9",
                f"streaming turn, flush every {seconds * 1000:g} ms: CPU s (batches published)",
                "s",
                median([c for c, _ in results]),
                None,
                "info",
                None,
                f"{median([float(n) for _, n in results]):.0f} batches for {CHUNKS} chunks",
            )
        )
    return rows
