"""WebSocket clients on the ``websockets`` library, in the bench's own process, for the memory
benchmarks (P5, P7), where the clients' CPU does not matter. Throughput and latency benchmarks
(P3, P8, P10) use raw-socket readers in a process of their own instead (``bench/wsreader.py``).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable

from websockets.asyncio.client import ClientConnection, connect

from bench.common import WAIT
from turnqueue.timeouts import within

SUBSCRIPTION = """subscription($s: ID!) { queueStatusChanged(sessionId: $s) {
  revision autoRun pauseReason heldBy count entries { id position content source } } }"""
CONNECT_BATCH = 100


async def subscribe(port: int, query: str, session_id: str) -> ClientConnection:
    """A graphql-transport-ws connection to the server at ``port`` with one subscription
    (id ``1``, variable ``s``: the session) sent; nothing of it read yet."""
    ws = await connect(
        f"ws://127.0.0.1:{port}/graphql",
        subprotocols=["graphql-transport-ws"],  # type: ignore[list-item]
        compression=None,
        ping_interval=None,
        max_size=None,
        open_timeout=WAIT,
    )
    await ws.send(json.dumps({"type": "connection_init", "payload": {}}))
    ack = json.loads(await within(ws.recv(), WAIT))
    if ack.get("type") != "connection_ack":
        raise RuntimeError(f"no connection_ack: {ack}")
    payload = {"query": query, "variables": {"s": session_id}}
    await ws.send(json.dumps({"id": "1", "type": "subscribe", "payload": payload}))
    return ws


async def _open_tq(port: int, session_id: str) -> ClientConnection:
    ws = await subscribe(port, SUBSCRIPTION, session_id)
    first = json.loads(await within(ws.recv(), WAIT))  # the snapshot
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
