"""P5: memory per idle subscription: server RSS growth over N ``queueStatusChanged``
subscriptions (5,000; 300 in smoke), each on its own WebSocket, against the growth over the same
number of bare Starlette WebSocket connections. Each side gets a fresh server subprocess; RSS is
read (psutil) after a warm-up of 20 connections and again after N more, with a garbage
collection in the server before each reading.

P5 spreads the subscriptions over 10 sessions, so the fan-out shares one execution per session
(a member holds a socket and a queue). P5b (issue 13) gives each subscription its own session
(2,000; 50 in smoke): nothing can be shared, so it is the cost of one standing GraphQL
subscription, against one bare WebSocket connection.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable

import psutil
from websockets.asyncio.client import ClientConnection

from bench.common import Backend, Config, Row, ServerProcess, median
from bench.wslib import _open_bare, _open_tq, close_all, open_many

WARM_UP = 20
SESSIONS = 10
SETUP_SLICE = 100


async def _growth(
    url: str,
    n: int,
    opener: Callable[[int, str], Awaitable[ClientConnection]],
    distinct: bool = False,
) -> float:
    """Bytes of server RSS per connection; ``distinct``: every connection on its own session."""
    opened: list[ClientConnection] = []
    async with ServerProcess(url) as server:
        count = WARM_UP + n if distinct else SESSIONS
        sessions: list[str] = []
        while len(sessions) < count:  # in slices: each call stays well inside WAIT
            body = {"sessions": min(SETUP_SLICE, count - len(sessions)), "entries": 3}
            setup = await server.call("/bench/setup", json.dumps(body).encode())
            sessions += [s["id"] for s in setup["sessions"]]
        warm, measured = (sessions[:WARM_UP], sessions[WARM_UP:]) if distinct else (sessions,) * 2
        try:
            opened += await open_many(opener, server.port, warm, WARM_UP)
            await asyncio.sleep(0.5)
            before = (await server.call("/bench/gc"))["rss"]
            opened += await open_many(opener, server.port, measured, n)
            await asyncio.sleep(1.0)
            after = (await server.call("/bench/gc"))["rss"]
            assert psutil.pid_exists(server.pid)
        finally:
            await close_all(opened)
    return float(after - before) / n


async def run(backend: Backend, cfg: Config) -> list[Row]:
    n = cfg.n(300, 5_000)
    nb = cfg.n(50, 2_000)
    ours: list[float] = []
    base: list[float] = []
    ours_b: list[float] = []
    base_b: list[float] = []
    async with backend.database() as url:
        for _ in range(cfg.reps):
            ours.append(await _growth(url, n, _open_tq))
            base.append(await _growth(url, n, _open_bare))
            ours_b.append(await _growth(url, nb, _open_tq, distinct=True))
            base_b.append(await _growth(url, nb, _open_bare))  # a bare socket has no session
    return [
        Row(
            "P5",
            f"server RSS per idle subscription, {n:,} of them (vs bare WebSocket connections)",
            "KiB",
            median(ours) / 1024,
            median(base) / 1024,
            "ratio<=",
            2.0,
        ),
        Row(
            "P5b",
            f"server RSS per idle subscription, {nb:,} distinct sessions (vs bare WebSockets)",
            "KiB",
            median(ours_b) / 1024,
            median(base_b) / 1024,
            "ratio<=",
            1.5,
        ),
    ]
