"""P3: one mutation fanned out to N ``queueStatusChanged`` subscribers over real WebSockets.

The server (bench/server.py) runs in a subprocess; N clients in this process each open their own
WebSocket, speak graphql-transport-ws and subscribe to the same session's queue status (5
entries). One event = one ``updateQueueEntry`` mutation over HTTP; a delivery's latency is from
just before the mutation is sent to the moment its client reads the frame. Events run one after
the other (the next starts when every subscriber got the previous one).

Baseline, same server process, same run: N bare Starlette WebSockets (``/bench/ws``) and
``POST /bench/broadcast`` sending the very payload a subscriber received, framed the same way.
deliveries/s = N × events / the summed time from trigger to last delivery.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Awaitable, Callable

from websockets.asyncio.client import ClientConnection, connect

from bench.common import WAIT, Backend, Config, Row, ServerProcess, median, percentile, post_json

SUBSCRIPTION = """subscription($s: ID!) { queueStatusChanged(sessionId: $s) {
  revision autoRun pauseReason heldBy count entries { id position content source } } }"""
MUTATION = """mutation($input: UpdateQueueEntryInput!) { updateQueueEntry(input: $input) {
  queue { revision } userErrors { code message } } }"""
CONNECT_BATCH = 100


class Sink:
    """Collects one event's deliveries across every client."""

    def __init__(self, expected: int) -> None:
        self.expected = expected
        self.started = 0.0
        self.arrivals: list[float] = []
        self.done = asyncio.Event()
        self.sample: str | None = None

    def begin(self) -> None:
        self.arrivals = []
        self.done = asyncio.Event()
        self.started = time.perf_counter()

    def hit(self, frame: str | bytes) -> None:
        self.arrivals.append(time.perf_counter())
        if self.sample is None and isinstance(frame, str):
            self.sample = frame
        if len(self.arrivals) >= self.expected:
            self.done.set()


async def _reader(ws: ClientConnection, sink: Sink) -> None:
    with contextlib.suppress(Exception):
        async for frame in ws:
            sink.hit(frame)


async def _open_tq(port: int, session_id: str) -> ClientConnection:
    ws = await connect(
        f"ws://127.0.0.1:{port}/graphql",
        subprotocols=["graphql-transport-ws"],  # type: ignore[list-item]
        compression=None,
        ping_interval=None,
        max_size=None,
        open_timeout=WAIT,
    )
    await ws.send(json.dumps({"type": "connection_init", "payload": {}}))
    ack = json.loads(await asyncio.wait_for(ws.recv(), WAIT))
    if ack.get("type") != "connection_ack":
        raise RuntimeError(f"no connection_ack: {ack}")
    payload = {"query": SUBSCRIPTION, "variables": {"s": session_id}}
    await ws.send(json.dumps({"id": "1", "type": "subscribe", "payload": payload}))
    first = json.loads(await asyncio.wait_for(ws.recv(), WAIT))  # the snapshot
    if first.get("type") != "next":
        raise RuntimeError(f"no snapshot: {first}")
    return ws


async def _open_bare(port: int, _session_id: str) -> ClientConnection:
    return await connect(
        f"ws://127.0.0.1:{port}/bench/ws",
        compression=None,
        ping_interval=None,
        max_size=None,
        open_timeout=WAIT,
    )


async def open_many(
    opener: Callable[[int, str], Awaitable[ClientConnection]],
    port: int,
    sessions: list[str],
    n: int,
) -> list[ClientConnection]:
    """``n`` connections, ``CONNECT_BATCH`` at a time, spread over ``sessions``."""
    opened: list[ClientConnection] = []
    for start in range(0, n, CONNECT_BATCH):
        batch = range(start, min(n, start + CONNECT_BATCH))
        opened.extend(
            await asyncio.gather(*(opener(port, sessions[i % len(sessions)]) for i in batch))
        )
    return opened


async def close_all(sockets: list[ClientConnection]) -> None:
    for start in range(0, len(sockets), 200):
        await asyncio.gather(
            *(ws.close() for ws in sockets[start : start + 200]), return_exceptions=True
        )


async def _events(
    sink: Sink, count: int, trigger: Callable[[int], Awaitable[None]]
) -> tuple[list[float], float]:
    """Latencies (s) of every delivery of ``count`` events and the summed fan-out time."""
    latencies: list[float] = []
    busy = 0.0
    for i in range(count):
        sink.begin()
        await trigger(i)
        try:
            await asyncio.wait_for(sink.done.wait(), WAIT)
        except TimeoutError:
            raise RuntimeError(
                f"event {i}: only {len(sink.arrivals)} of {sink.expected} deliveries"
            ) from None
        latencies.extend(t - sink.started for t in sink.arrivals)
        busy += max(sink.arrivals) - sink.started
        await asyncio.sleep(0.05)  # let stragglers' bookkeeping settle between events
    return latencies, busy


async def run(backend: Backend, cfg: Config) -> list[Row]:
    n = cfg.n(100, 1000)
    events = cfg.n(1, 5)
    results: dict[str, list[dict[str, float]]] = {"tq": [], "bare": []}
    async with backend.database() as url, ServerProcess(url) as server:
        setup = await server.call(
            "/bench/setup", json.dumps({"sessions": 1, "entries": 5}).encode()
        )
        session = setup["sessions"][0]
        sid, entry = session["id"], session["entries"][0]
        tq_sink, bare_sink = Sink(n), Sink(n)
        tq_clients = await open_many(_open_tq, server.port, [sid], n)
        bare_clients = await open_many(_open_bare, server.port, [sid], n)
        readers = [asyncio.create_task(_reader(ws, tq_sink)) for ws in tq_clients]
        readers += [asyncio.create_task(_reader(ws, bare_sink)) for ws in bare_clients]
        counter = iter(range(1_000_000))

        async def mutate(_i: int) -> None:
            variables = {
                "input": {"sessionId": sid, "entryId": entry, "content": f"v{next(counter)}"}
            }
            body = json.dumps({"query": MUTATION, "variables": variables}).encode()
            status, data = await post_json(server.port, "/graphql", body)
            if status != 200 or b'"userErrors":[]' not in data:
                raise RuntimeError(f"mutation failed: {status} {data[:300]!r}")

        try:
            await _events(tq_sink, 1, mutate)  # warm-up, and a real payload to broadcast
            assert tq_sink.sample is not None
            payload = json.dumps(json.loads(tq_sink.sample)["payload"]).encode()

            async def broadcast(_i: int) -> None:
                await post_json(server.port, "/bench/broadcast", payload)

            await _events(bare_sink, 1, broadcast)
            for rep in range(cfg.reps):
                order = [("tq", tq_sink, mutate), ("bare", bare_sink, broadcast)]
                for name, sink, trigger in order if rep % 2 == 0 else order[::-1]:
                    latencies, busy = await _events(sink, events, trigger)
                    results[name].append(
                        {
                            "rate": len(latencies) / busy,
                            "p50": percentile(latencies, 50) * 1000,
                            "p99": percentile(latencies, 99) * 1000,
                        }
                    )
            if cfg.profile:
                path = (cfg.out / "profiles" / f"P3-{backend.name}.txt").resolve()
                path.parent.mkdir(parents=True, exist_ok=True)
                await server.call("/bench/profile/start")
                await _events(tq_sink, events, mutate)
                await server.call("/bench/profile/stop", json.dumps({"path": str(path)}).encode())
        finally:
            await close_all(tq_clients + bare_clients)
            for task in readers:
                task.cancel()
            await asyncio.gather(*readers, return_exceptions=True)

    def med(name: str, key: str) -> float:
        return median([r[key] for r in results[name]])

    return [
        Row(
            "P3",
            f"deliveries/s, 1 mutation → {n:,} queueStatusChanged subscribers (vs bare broadcast)",
            "/s",
            med("tq", "rate"),
            med("bare", "rate"),
            "ratio>=",
            0.5,
        ),
        Row(
            "P3",
            f"p50 delivery latency, {n:,} subscribers",
            "ms",
            med("tq", "p50"),
            med("bare", "p50"),
            "info",
        ),
        Row(
            "P3",
            f"p99 delivery latency, {n:,} subscribers",
            "ms",
            med("tq", "p99"),
            med("bare", "p99"),
            "value<=",
            100,
        ),
    ]
