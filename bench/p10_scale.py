"""P10 (issue 13, called P9 there; P9 is the output log): scale on this machine.

N concurrent ``queueStatusChanged`` subscribers over N / 10 sessions (10 per session), one event
per session per second, spread over the second (``bench/pacer.py``: a ``setAutoRun`` toggle
through the engine inside the server, scheduled at a fixed time). The subscribers are
raw-socket readers in a process of their own (``bench/wsreader.py``); a delivery's latency is
from its event's *scheduled* time to the moment its reader reads the frame (``time.monotonic``
in both processes), so a server that falls behind shows as latency. The first WARM_UP seconds
are not counted.

N holds when the p99 latency is ≤ 100 ms, no subscriber got an error (RESYNC or other), and
every subscriber read its session's last revision. N steps through STEPS (a fresh server
each) and stops at the first that does not hold; the summary row is the largest N that held
(target: 5,000). No baseline: the target is absolute. One run per step (no repetitions).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

import psutil

from bench.common import WAIT, Backend, Config, Row, ServerProcess, percentile, run_delay
from bench.p7_events import FIELDS
from bench.p8_watchers import sessions_of
from bench.wsreader import Frames, Readers, Spec

PER_SESSION = 10
STEPS = (500, 1_000, 2_000, 5_000, 10_000)
SMOKE_STEPS = (20,)
LIMIT_MS = 100.0


@dataclass(slots=True)
class Step:
    n: int
    sessions: int
    p50: float
    p99: float
    delivered: int
    expected: int
    errors: int
    resyncs: int
    behind: int  # subscribers that never read their session's last revision
    late_ms: float
    cpu: float  # server CPU share over the paced window (1.0 = one core)
    starved: float  # share of the window the server's loop was runnable but had no CPU

    @property
    def holds(self) -> bool:
        return self.p99 <= LIMIT_MS and not self.errors and not self.behind


async def _collect(readers: Readers, final: dict[int, int], n: int) -> list[Frames]:
    """Frames until every subscriber read its target revision (bounded by WAIT)."""
    seen: dict[int, int] = {}
    got: list[Frames] = []
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        frames = await readers.wait(n, min(1.0, max(0.0, deadline - time.monotonic())))
        got.append(frames)
        for conn, rev in zip(frames.conn, frames.rev, strict=True):
            seen[conn] = max(seen.get(conn, -1), rev)
        if all(seen.get(c, readers.snapshots.get(c, -1)) >= r for c, r in final.items()):
            break
    return got


async def step(backend: Backend, n: int, seconds: int, warm_up: int) -> Step:
    count = max(1, n // PER_SESSION)
    _kind, query, _marker = FIELDS["queueStatusChanged"]
    async with backend.database() as url, ServerProcess(url) as server:
        sids = await sessions_of(server, count)
        async with Readers(Spec(server.port, "/graphql", n, query, sids)) as readers:
            process = psutil.Process(server.pid)
            paced = await server.call(
                "/bench/pace", json.dumps({"sessions": sids, "seconds": seconds}).encode()
            )
            start, base = float(paced["start"]), [int(b) for b in paced["base"]]
            before, began, delay = process.cpu_times(), time.monotonic(), run_delay(server.pid)
            late = 0.0
            frames: list[Frames] = []
            for _ in range(1 + int(seconds + WAIT) // 30):  # /bench/pace/wait: 30 s at most
                frames += [await readers.wait(10 * n, 0.0)]  # keep the pipe short
                waited = await server.call("/bench/pace/wait")
                late = float(waited["late_ms"])
                if waited["done"]:
                    break
            after, wall = process.cpu_times(), time.monotonic() - began
            delay = run_delay(server.pid) - delay
            final = {c: base[c % count] + seconds for c in range(n)}
            frames += await _collect(readers, final, n)
    latencies: list[float] = []
    seen: dict[int, int] = {}
    errors = resyncs = 0
    for batch in frames:
        errors += batch.errors
        resyncs += batch.resyncs
        for conn, ts, rev in zip(batch.conn, batch.ts, batch.rev, strict=True):
            s = conn % count
            seen[conn] = max(seen.get(conn, -1), rev)
            j = rev - base[s] - 1  # the event that made this revision
            if j >= warm_up:
                latencies.append((ts - (start + j + s / count)) * 1000)
    cpu = after.user + after.system - before.user - before.system
    return Step(
        n=n,
        sessions=count,
        p50=percentile(latencies, 50),
        p99=percentile(latencies, 99),
        delivered=len(latencies),
        expected=n * (seconds - warm_up),
        errors=errors,
        resyncs=resyncs,
        behind=sum(1 for c, r in final.items() if seen.get(c, -1) < r),
        late_ms=late,
        cpu=cpu / wall if wall > 0 else 0.0,
        starved=delay / wall if wall > 0 else 0.0,
    )


async def run(backend: Backend, cfg: Config) -> list[Row]:
    seconds, warm_up = cfg.n(3, 12), cfg.n(1, 2)
    rows: list[Row] = []
    largest = 0
    steps = SMOKE_STEPS if cfg.smoke else STEPS
    for n in steps:
        result = await step(backend, n, seconds, warm_up)
        rows.append(
            Row(
                "P10",
                f"p99 delivery latency, {n:,} subscribers over {result.sessions:,} sessions, "
                "1 event per session per second",
                "ms",
                result.p99,
                None,
                "value<=",
                LIMIT_MS,
                note=f"p50 {result.p50:,.1f} ms; {result.delivered:,} of {result.expected:,} "
                f"deliveries (a subscriber that fell behind skips to the newest state); "
                f"{result.resyncs} RESYNC, {result.errors} error frames, {result.behind} "
                f"behind at the end; events up to {result.late_ms:,.0f} ms late; server CPU "
                f"{result.cpu:.0%} of a core, waiting for a CPU {result.starved:.0%} of the time",
            )
        )
        if not result.holds:
            break
        largest = n
    rows.append(
        Row(
            "P10",
            "largest N of subscribers (10 per session, 1 event per session per second) with "
            f"p99 ≤ {LIMIT_MS:g} ms and no errors, of {', '.join(f'{s:,}' for s in steps)}",
            "subscribers",
            float(largest),
            None,
            "value>=",
            cfg.n(SMOKE_STEPS[0], 5_000),
        )
    )
    return rows
