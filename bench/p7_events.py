"""P7: server memory per event on standing subscriptions, measured from outside (issue 13).

The server (bench/server.py) runs in a subprocess; this process holds raw WebSocket clients
(graphql-transport-ws, no GraphQL library) subscribed to one session, and reads the server's RSS
with psutil (``/bench/gc``: a garbage collection first). For each subscription field and for
fan-out on (the subscribers share one execution) and off (each runs its own), a fresh server is
sent a warm-up of events until its memory has settled (below), RSS is read, N more events are sent
(10,000; 40 in smoke) and RSS is read again: the figure is the growth per event.

Settled: the warm-up sends events in steps of WARM_UP (5,000; 20 in smoke, one step) until a
step grows RSS by at most SETTLED per event (a tenth of the target), at most WARM_UP_STEPS steps.
A fresh server's RSS rises by about 1.2 MiB over its first 10,000–20,000 frames and then stays
flat for as long as it runs, with turnqueue's subscriptions and with the bare WebSockets of the
baseline alike, with no Python allocation growing (tracemalloc); a 5,000-event warm-up measured
part of that one-time rise as growth per event (0.08–0.12 KiB). Settling cannot hide a leak:
memory that grows by more than SETTLED with every event never settles, and the last steps'
growth is then what the figure reads.

Events come from ``/bench/events`` in batches of BATCH, one after the other inside the server;
the next batch starts when every client has read the frame carrying the batch's last marker (a
revision, or for ``turnOutput`` the number of frames it read: its events are chunks of one
running turn, a week long, published on the bus as the engine does), so nothing is in flight
when RSS is read and no subscriber falls behind its bus buffer. Smoke mode reuses one server per
fan-out setting for every field, to stay short; its figures mean nothing.

Turns (issue 23, finding 9): FOLLOWERS standing ``turnOutput(sessionId:)`` subscriptions (no
turnId: each follows the session's turns) on a fresh server, TURNS zero-time turns after a
settled warm-up; RSS and the objects the garbage collector tracks, per turn. Baseline: the same
turns on a fresh server with no subscription. A stream that kept something per turn shows as
objects per turn (one per turn per stream would be FOLLOWERS).

The turns' warm-up (2026-12-07-p7-objects.md): on PostgreSQL a fresh server's object count
rises by ~1,000–2,000 over its first ~1,000 turns and then stays flat. The rise is asyncpg's
per-connection prepared-statement cache (``_StatementCacheEntry``, ``PreparedStatementState``,
``RecordDescriptor``, an expiry timer each), filled as each pool connection first runs each
statement (the turn's statements, and the cluster's heartbeat and recovery sweep every 3.3 s
landing on whichever connection is free), and the first compilation of rarely run statements:
bounded (statements × connections; asyncpg expires an entry 300 s after it was prepared and
prepares it again on its next use), and in lumps: a window of 200 turns keeps 0, then 300. So
the warm-up sends TURNS_STEP turns at a time until a step keeps at most SETTLED_OBJECTS per
turn (at most TURNS_WARM_UP_STEPS steps), and the TURNS measured turns are read in windows of
TURNS_STEP: the figure is the median window's objects per turn. What a turn keeps, every turn
keeps, so it shows in every window; a lump of warm-up left over, or work in flight when a count
is taken (a sweep holding its statement: ±250 objects), moves one window, not the median.

Baseline, same run: as many bare Starlette WebSockets (``/bench/ws``) sent as many ``next``
frames of a payload of the same size (``/bench/bare-events``). The target is absolute: at most
0.05 KiB per event after warm-up (graphql-core 3.3.2's per-event memo alone was ~3 KiB per event
per subscription; turnqueue/api/execution.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Awaitable, Callable
from typing import Any

import psutil
from websockets.asyncio.client import ClientConnection

from bench.common import WAIT, Backend, Config, Row, ServerProcess, median
from bench.wslib import _open_bare, close_all, subscribe
from turnqueue.timeouts import within

#: Events before the first reading. At least the metrics' MAX_STAMPS (4,096): the metrics keep
#: the newest published events to time their delivery, a bounded cache that fills first.
WARM_UP = 5_000
#: At most this many warm-up steps (of WARM_UP events) before the figure is measured anyway.
WARM_UP_STEPS = 8
#: Settled: a warm-up step grew RSS by at most this many bytes per event (a tenth of the
#: target; PostgreSQL's runs move by a page or two between steps, so "not at all" is too strict).
SETTLED = 0.005 * 1024
BATCH = 100  # events per /bench/events call (under the bus buffer of 256)
SUBSCRIBERS = 5

#: field -> (kind of /bench/events, subscription, the marker a frame carries)
Marker = Callable[[dict[str, Any]], int]
FIELDS: dict[str, tuple[str, str, Marker]] = {
    "queueStatusChanged": (
        "queue",
        """subscription($s: ID!) { queueStatusChanged(sessionId: $s) {
          id sessionId revision autoRun pauseReason heldBy count entries { id content } } }""",
        lambda d: int(d["queueStatusChanged"]["revision"]),
    ),
    "cancellationChanged": (
        "cancellation",
        """subscription($s: ID!) { cancellationChanged(sessionId: $s) {
          id sessionId pending revision } }""",
        lambda d: int(d["cancellationChanged"]["revision"]),
    ),
    "sessionChanged": (
        "cancellation",
        """subscription($s: ID!) { sessionChanged(sessionId: $s) {
          id state revision cancellationPending cancellationRevision
          cancellation { pending revision } currentTurn { id status } } }""",
        lambda d: int(d["sessionChanged"]["cancellationRevision"]),
    ),
    "turnOutput": (
        "output",
        """subscription($s: ID!) { turnOutput(sessionId: $s) {
          sessionId turnId offset text done status } }""",
        lambda _d: 1,  # counted: frame 0 is the stream's first read, then one per event
    ),
}
#: Fields whose marker counts (each frame adds it to what was read) rather than names.
COUNTED = {"turnOutput"}
#: Turns: a turn's end is what a session-following stream's frames are counted by.
TURN_ENDS: Marker = lambda d: 1 if d["turnOutput"]["done"] else 0  # noqa: E731
#: Turns: standing session-following turnOutput subscriptions, warm-up and measured turns.
FOLLOWERS = 20
TURNS = 1_000
#: Turns: the warm-up's steps and the measured windows, in turns.
TURNS_STEP = 200
#: At most this many warm-up steps before the turns are measured anyway.
TURNS_WARM_UP_STEPS = 8
#: Settled: a warm-up step kept at most this many objects per turn (a tenth of the target).
SETTLED_OBJECTS = 0.025


class Client:
    """One raw graphql-transport-ws subscriber; remembers the newest marker it read (for a
    ``counted`` field, the sum of the frames' markers less one: the index of the last)."""

    def __init__(self, ws: ClientConnection, marker: Marker, counted: bool = False) -> None:
        self.ws = ws
        self.marker = marker
        self.counted = counted
        self.seen = -1
        self.frames = 0
        self.sample = ""
        self.changed = asyncio.Event()
        self.task = asyncio.create_task(self._read())

    async def _read(self) -> None:
        async for frame in self.ws:
            message = json.loads(frame)
            if message.get("type") != "next" or "errors" in message["payload"]:
                raise RuntimeError(f"unexpected frame: {str(frame)[:300]}")
            self.frames += 1
            self.sample = str(frame)
            value = self.marker(message["payload"]["data"])
            self.seen = self.seen + value if self.counted else max(self.seen, value)
            self.changed.set()

    async def until(self, marker: int) -> None:
        while self.seen < marker:
            if self.task.done():
                self.task.result()
                raise RuntimeError("the subscription ended")
            self.changed.clear()
            await within(self.changed.wait(), WAIT)


async def _open(port: int, field: str, session_id: str) -> Client:
    _, query, marker = FIELDS[field]
    return Client(await subscribe(port, query, session_id), marker, field in COUNTED)


async def _rss(server: ServerProcess) -> int:
    rss: int = (await server.call("/bench/gc"))["rss"]
    return rss


async def _memory(server: ServerProcess) -> tuple[int, int]:
    """(RSS bytes, objects the garbage collector tracks), after a collection."""
    answer = await server.call("/bench/gc")
    return int(answer["rss"]), int(answer["objects"])


def _server(url: str, fanout: bool = True) -> ServerProcess:
    return ServerProcess(
        url,
        {
            "TURNQUEUE_SUBSCRIPTION_FANOUT": "true" if fanout else "false",
            "TURNQUEUE_SCRIPTED_TURN_SECONDS": "0",  # turnOutput's events: zero-time turns
        },
    )


async def _growth(
    server: ServerProcess, field: str, warm_up: int, steps: int, n: int
) -> tuple[float, str]:
    """Server RSS bytes per event over ``n`` events after the settled warm-up; a frame as sent."""
    kind = FIELDS[field][0]
    body = {"sessions": 1, "hold": kind == "output"}  # turnOutput: chunks of a running turn
    setup = await server.call("/bench/setup", json.dumps(body).encode())
    sid = setup["sessions"][0]["id"]
    clients = [await _open(server.port, field, sid) for _ in range(SUBSCRIBERS)]
    try:
        for client in clients:
            await client.until(0)  # the snapshot (turnOutput: the running turn's logged text)

        async def send(first: int, count: int) -> None:
            await _events(server, clients, sid, kind, first, count)

        start = await _settle(server, send, warm_up, steps)
        before = await _rss(server)
        await send(start, n)
        after = await _rss(server)
        assert psutil.pid_exists(server.pid)
    finally:
        await close_all([c.ws for c in clients])
        for c in clients:
            c.task.cancel()
    return float(after - before) / n, clients[0].sample


async def _settle(
    server: ServerProcess, send: Callable[[int, int], Awaitable[None]], step: int, steps: int
) -> int:
    """Send ``step`` events at a time until one step grows RSS by at most ``SETTLED`` per event
    (at most ``steps`` steps); the number of events sent."""
    sent, rss = 0, await _rss(server)
    for _ in range(steps):
        await send(sent, step)
        sent += step
        rss, before = await _rss(server), rss
        if rss - before <= SETTLED * step:
            break
    return sent


async def _events(
    server: ServerProcess, clients: list[Client], sid: str, kind: str, start: int, count: int
) -> None:
    for first in range(start, start + count, BATCH):
        size = min(BATCH, start + count - first)
        body = {"session": sid, "kind": kind, "start": first, "count": size}
        if kind == "turns":  # no first frame to wait for: every stream listens before a turn
            body["listeners"] = len(clients)
        last = (await server.call("/bench/events", json.dumps(body).encode()))["marker"]
        for client in clients:
            await client.until(int(last))


async def _bare_growth(url: str, warm_up: int, steps: int, n: int, payload: str) -> float:
    async with ServerProcess(url) as server:
        sockets = [await _open_bare(server.port, "") for _ in range(SUBSCRIBERS)]
        readers = [asyncio.create_task(_drain(ws)) for ws in sockets]

        async def send(_first: int, count: int) -> None:
            await _bare_events(server, sockets, count, payload)

        try:
            await _settle(server, send, warm_up, steps)
            before = await _rss(server)
            await send(0, n)
            after = await _rss(server)
        finally:
            await close_all(sockets)
            for r in readers:
                r.cancel()
    return float(after - before) / n


async def _drain(ws: ClientConnection) -> None:
    async for _frame in ws:
        pass


async def _bare_events(
    server: ServerProcess, sockets: list[ClientConnection], count: int, payload: str
) -> None:
    for first in range(0, count, BATCH):
        size = min(BATCH, count - first)
        await server.call(
            "/bench/bare-events", json.dumps({"count": size, "payload": payload}).encode()
        )


async def _turn_growth(
    url: str, followers: int, step: int, steps: int, n: int
) -> tuple[float, list[float], int]:
    """(RSS bytes gained per turn, objects kept per turn in each window of ``step`` turns, turns
    of warm-up) over ``n`` zero-time turns after the settled warm-up, with ``followers``
    standing session-following turnOutput subscriptions, on a fresh server."""
    async with _server(url) as server:
        setup = await server.call("/bench/setup", json.dumps({"sessions": 1}).encode())
        sid = setup["sessions"][0]["id"]
        query = FIELDS["turnOutput"][1]
        clients = [
            Client(await subscribe(server.port, query, sid), TURN_ENDS, counted=True)
            for _ in range(followers)
        ]
        try:
            sent, objects = 0, (await _memory(server))[1]
            for _ in range(steps):
                await _events(server, clients, sid, "turns", sent, step)
                sent += step
                objects, before = (await _memory(server))[1], objects
                if objects - before <= SETTLED_OBJECTS * step:
                    break
            rss, objects = await _memory(server)
            kept: list[float] = []
            for first in range(sent, sent + n, step):
                count = min(step, sent + n - first)
                await _events(server, clients, sid, "turns", first, count)
                objects, before = (await _memory(server))[1], objects
                kept.append(float(objects - before) / count)
            rss_after = (await _memory(server))[0]
        finally:
            await close_all([c.ws for c in clients])
            for c in clients:
                c.task.cancel()
    return float(rss_after - rss) / n, kept, sent


def _windows(runs: list[tuple[float, list[float], int]]) -> str:
    """Each run's warm-up and its windows' objects per turn, for a row's note."""
    return "; ".join(
        f"{warm:,} turns of warm-up, windows " + " ".join(f"{k:g}" for k in kept)
        for _, kept, warm in runs
    )


async def _turn_rows(url: str, cfg: Config) -> list[Row]:
    """Issue 23 (9): what standing session-following turnOutput streams keep per turn."""
    n, step, steps = cfg.n(20, TURNS), cfg.n(10, TURNS_STEP), cfg.n(1, TURNS_WARM_UP_STEPS)
    followed = [await _turn_growth(url, FOLLOWERS, step, steps, n) for _ in range(cfg.reps)]
    alone = [await _turn_growth(url, 0, step, steps, n) for _ in range(cfg.reps)]
    what = (
        f"{FOLLOWERS} standing `turnOutput(sessionId:)` followers, {n:,} turns once objects settled"
    )
    note = "baseline: the same turns on a fresh server with no subscription"
    return [
        Row(
            "P7",
            f"server RSS per zero-time turn, {what}",
            "KiB",
            median([r for r, _, _ in followed]) / 1024,
            median([r for r, _, _ in alone]) / 1024,
            "info",
            note=note,
        ),
        Row(
            "P7",
            f"objects kept per zero-time turn (garbage collector; the median window of "
            f"{step:,} turns), {what}",
            "objects",
            median([median(kept) for _, kept, _ in followed]),
            median([median(kept) for _, kept, _ in alone]),
            "value<=",
            0.25,
            note=note + f"; one kept per turn per stream would be {FOLLOWERS}; followers: "
            f"{_windows(followed)}; none: {_windows(alone)}",
        ),
    ]


async def run(backend: Backend, cfg: Config) -> list[Row]:
    n, warm_up, steps = cfg.n(40, 10_000), cfg.n(20, WARM_UP), cfg.n(1, WARM_UP_STEPS)
    rows: list[Row] = []
    sample = ""
    async with backend.database() as url:
        results: dict[tuple[str, bool], list[float]] = {}
        for _ in range(cfg.reps):
            for fanout in (True, False):
                async with contextlib.AsyncExitStack() as stack:
                    # A fresh server per figure (memory freed by an earlier one would be
                    # reused and hide growth); smoke mode shares one, to stay short.
                    shared = (
                        await stack.enter_async_context(_server(url, fanout)) if cfg.smoke else None
                    )
                    for field in FIELDS:
                        async with contextlib.AsyncExitStack() as own:
                            server = shared or await own.enter_async_context(_server(url, fanout))
                            growth, frame = await _growth(server, field, warm_up, steps, n)
                        results.setdefault((field, fanout), []).append(growth)
                        if field == "queueStatusChanged":
                            sample = frame
        payload = json.loads(sample)["payload"] if sample else {"data": None}
        base = [
            await _bare_growth(url, warm_up, steps, n, json.dumps(payload)) for _ in range(cfg.reps)
        ]
        turn_rows = await _turn_rows(url, cfg)
    baseline = median(base) / 1024
    for (field, fanout), values in results.items():
        grouped = " (not grouped: deltas)" if field == "turnOutput" and fanout else ""
        rows.append(
            Row(
                "P7",
                f"server RSS per event, {SUBSCRIBERS} standing `{field}` subscribers, "
                f"fan-out {'on' if fanout else 'off'}{grouped}, {n:,} events once memory settled",
                "KiB",
                median(values) / 1024,
                baseline,
                "value<=",
                0.05,
                note="baseline: bare WebSockets sent as many frames of the same size",
            )
        )
    return rows + turn_rows
