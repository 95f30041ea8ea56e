"""P3 (re-based, issue 13): one mutation fanned out to N ``queueStatusChanged`` subscribers.

The server (bench/server.py) runs in a subprocess. N clients (1,000; 100 in smoke) each on its
own WebSocket subscribe to the same session's queue status (5 entries); they are raw-socket
readers in a process of their own (``bench/wsreader.py``), as are the baseline's, so neither
side is capped by a client parsing in the bench's process. One event = one ``updateQueueEntry``
mutation over HTTP; a delivery's latency is from just before the mutation is sent to the moment
its reader reads the frame (``time.monotonic()`` in both processes). Events run one after the
other (the next starts when every subscriber got the previous one).

Baseline, same server process, same run: N bare Starlette WebSockets (``/bench/ws``) read the
same way, and ``POST /bench/broadcast`` sending the very payload a subscriber received, framed
the same way. deliveries/s = N × events / the summed time from trigger to last delivery.
Informative: server CPU (psutil, user + system) per delivery over the measured events.

Before the re-base, the clients were ``websockets`` connections in the bench process, which
capped the bare broadcast (~48k deliveries/s against ~110k) and flattered the ratio; those
figures are kept in ``bench/results/README.md``.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable

import psutil

from bench.common import (
    Backend,
    Config,
    Row,
    ServerProcess,
    median,
    percentile,
    post_json,
    run_delay,
)
from bench.wslib import SUBSCRIPTION
from bench.wsreader import Readers, Spec, payload_of

MUTATION = """mutation($input: UpdateQueueEntryInput!) { updateQueueEntry(input: $input) {
  queue { revision } userErrors { code message } } }"""


class Side:
    """One side's readers, its trigger and its results per repetition."""

    def __init__(
        self, readers: Readers, n: int, trigger: Callable[[], Awaitable[None]], pid: int
    ) -> None:
        self.readers = readers
        self.n = n
        self.trigger = trigger
        self.process = psutil.Process(pid)
        self.results: list[dict[str, float]] = []
        self.sample = ""

    async def events(self, count: int) -> dict[str, float]:
        """``count`` events one after the other: rate, latency percentiles, CPU per delivery."""
        latencies: list[float] = []
        busy = 0.0
        before, reader_before = self.process.cpu_times(), self.readers.cpu()
        delay, began = run_delay(self.process.pid), time.monotonic()
        for i in range(count):
            started = time.monotonic()
            await self.trigger()
            frames = await self.readers.wait(self.n)
            if len(frames.ts) < self.n or frames.errors:
                raise RuntimeError(
                    f"event {i}: {len(frames.ts)} of {self.n} deliveries, {frames.errors} errors"
                    f" ({frames.sample[:300]})"
                )
            self.sample = self.sample or frames.sample
            latencies.extend(t - started for t in frames.ts)
            busy += max(frames.ts) - started
            await asyncio.sleep(0.05)  # let stragglers' bookkeeping settle between events
        after, reader_cpu = self.process.cpu_times(), self.readers.cpu() - reader_before
        cpu = max(0.0, after.user + after.system - before.user - before.system)
        delay, wall = run_delay(self.process.pid) - delay, time.monotonic() - began
        return {
            "starved": delay / wall,
            "reader": reader_cpu / len(latencies) * 1e6,
            "rate": len(latencies) / busy,
            "p50": percentile(latencies, 50) * 1000,
            "p99": percentile(latencies, 99) * 1000,
            "cpu": cpu / len(latencies) * 1e6,
        }


async def run(backend: Backend, cfg: Config) -> list[Row]:
    n = cfg.n(100, 1000)
    events = cfg.n(1, 5)
    async with backend.database() as url, ServerProcess(url) as server:
        setup = await server.call(
            "/bench/setup", json.dumps({"sessions": 1, "entries": 5}).encode()
        )
        session = setup["sessions"][0]
        sid, entry = session["id"], session["entries"][0]
        counter = iter(range(1_000_000))

        async def mutate() -> None:
            variables = {
                "input": {"sessionId": sid, "entryId": entry, "content": f"v{next(counter)}"}
            }
            body = json.dumps({"query": MUTATION, "variables": variables}).encode()
            status, data = await post_json(server.port, "/graphql", body)
            if status != 200 or b'"userErrors":[]' not in data:
                raise RuntimeError(f"mutation failed: {status} {data[:300]!r}")

        payload = b""

        async def broadcast() -> None:
            await post_json(server.port, "/bench/broadcast", payload)

        tq_spec = Spec(server.port, "/graphql", n, SUBSCRIPTION, [sid])
        async with (
            Readers(tq_spec) as tq_readers,
            Readers(Spec(server.port, "/bench/ws", n)) as bare_readers,
        ):
            tq = Side(tq_readers, n, mutate, server.pid)
            bare = Side(bare_readers, n, broadcast, server.pid)
            await tq.events(1)  # warm-up, and a real payload to broadcast
            payload = payload_of(tq.sample)
            await bare.events(1)
            for rep in range(cfg.reps):
                for side in (tq, bare) if rep % 2 == 0 else (bare, tq):
                    side.results.append(await side.events(events))
            if cfg.profile:
                path = (cfg.out / "profiles" / f"P3-{backend.name}.txt").resolve()
                path.parent.mkdir(parents=True, exist_ok=True)
                await server.call("/bench/profile/start")
                await tq.events(events)
                await server.call("/bench/profile/stop", json.dumps({"path": str(path)}).encode())

    def med(side: Side, key: str) -> float:
        return median([r[key] for r in side.results])

    what = f"{n:,} queueStatusChanged subscribers, raw-socket readers in another process"
    return [
        Row(
            "P3",
            f"deliveries/s, 1 mutation → {what} (vs bare broadcast)",
            "/s",
            med(tq, "rate"),
            med(bare, "rate"),
            "ratio>=",
            0.7,
            note=f"the server's loop waited for a CPU {med(tq, 'starved'):.0%} / "
            f"{med(bare, 'starved'):.0%} of the time (other work on the machine)",
        ),
        Row(
            "P3",
            f"p50 delivery latency, {n:,} subscribers",
            "ms",
            med(tq, "p50"),
            med(bare, "p50"),
            "info",
        ),
        Row(
            "P3",
            f"p99 delivery latency, {n:,} subscribers (vs bare broadcast)",
            "ms",
            med(tq, "p99"),
            med(bare, "p99"),
            "ratio<=",
            1.5,
        ),
        Row(
            "P3",
            f"server CPU per delivery, {n:,} subscribers (mutation included; vs broadcast)",
            "µs",
            med(tq, "cpu"),
            med(bare, "cpu"),
            "info",
            note=f"the readers' own CPU per delivery: {med(tq, 'reader'):,.0f} / "
            f"{med(bare, 'reader'):,.0f} µs",
        ),
    ]
