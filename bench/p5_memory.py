"""P5: memory per idle subscription: server RSS growth over N ``queueStatusChanged``
subscriptions (5,000; 300 in smoke), each on its own WebSocket, against the growth over the same
number of bare Starlette WebSocket connections. Each side gets a fresh server subprocess; RSS is
read (psutil) after a warm-up of 50 connections and again after N more, with a garbage
collection in the server before each reading.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable

import psutil
from websockets.asyncio.client import ClientConnection

from bench.common import Backend, Config, Row, ServerProcess, median
from bench.p3_fanout import _open_bare, _open_tq, close_all, open_many

WARM_UP = 20
SESSIONS = 10


async def _growth(
    url: str, n: int, opener: Callable[[int, str], Awaitable[ClientConnection]]
) -> float:
    """Bytes of server RSS per connection."""
    opened: list[ClientConnection] = []
    async with ServerProcess(url) as server:
        setup = await server.call(
            "/bench/setup", json.dumps({"sessions": SESSIONS, "entries": 3}).encode()
        )
        sessions = [s["id"] for s in setup["sessions"]]
        try:
            opened += await open_many(opener, server.port, sessions, WARM_UP)
            await asyncio.sleep(0.5)
            before = (await server.call("/bench/gc"))["rss"]
            opened += await open_many(opener, server.port, sessions, n)
            await asyncio.sleep(1.0)
            after = (await server.call("/bench/gc"))["rss"]
            assert psutil.pid_exists(server.pid)
        finally:
            await close_all(opened)
    return float(after - before) / n


async def run(backend: Backend, cfg: Config) -> list[Row]:
    n = cfg.n(300, 5_000)
    ours: list[float] = []
    base: list[float] = []
    async with backend.database() as url:
        for _ in range(cfg.reps):
            ours.append(await _growth(url, n, _open_tq))
            base.append(await _growth(url, n, _open_bare))
    return [
        Row(
            "P5",
            f"server RSS per idle subscription, {n:,} of them (vs bare WebSocket connections)",
            "KiB",
            median(ours) / 1024,
            median(base) / 1024,
            "ratio<=",
            2.0,
        )
    ]
