"""A bounded soak (R3, S3, U3): hundreds of graphql-transport-ws subscribers connect, subscribe
and disconnect abruptly while mutations run; afterwards the server's asyncio tasks and
subscriptions are back to their baseline and its memory stayed bounded. A consumer that reads
nothing does not delay a fast one (which gets every revision); the slow one is told to resync
(``RESYNC``) instead of growing the server's memory.

The same soak runs for minutes, outside the suite, as ``python scripts/soak.py --minutes N``
(it imports :func:`soak` from here). ``TURNQUEUE_SOAK_SECONDS`` sets the suite's load phase.
Standing subscribers hold every subscription field while turns stream into their sessions one
after the other and connections churn; the server's RSS is sampled every few seconds, so the
script can tell whether it is flat after the first minutes (P7, issue 13).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from clients import poll
from ops_helpers import Client, ProcServer
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from turnqueue.timeouts import within

SOAK_SECONDS = float(os.environ.get("TURNQUEUE_SOAK_SECONDS", "15"))
PROTOCOL = "graphql-transport-ws"
SUBSCRIPTIONS = [
    "subscription($s: ID!) { queueStatusChanged(sessionId: $s) { revision count heldBy } }",
    "subscription($s: ID!) { sessionChanged(sessionId: $s) { revision state } }",
    "subscription($s: ID!) { cancellationChanged(sessionId: $s) { pending revision } }",
    "subscription($s: ID!) { turnOutput(sessionId: $s) { offset text done } }",
]
BIG_SUB = (
    "subscription($s: ID!) { queueStatusChanged(sessionId: $s) { revision entries { content } } }"
)
#: a generous bound for the server's memory growth over the soak (Python keeps freed arenas)
RSS_MARGIN = 200 * 1024 * 1024
TASK_MARGIN = 5
RSS_EVERY = 5.0  # seconds between two RSS samples
SESSION_STATE = "query($id: ID!) { session(id: $id) { state } }"


@dataclass
class SoakFigures:
    seconds: float = 0
    connections: int = 0
    subscriptions: int = 0
    aborted: int = 0  # closed by dropping the TCP connection, no close frame
    mutations: int = 0
    mutation_max_ms: float = 0  # slowest mutation under the subscription churn
    deliveries: int = 0
    peak_open: int = 0
    tasks_before: float = 0
    tasks_after: float = 0
    subscriptions_after: float = 0
    rss_before_mb: float = 0
    rss_after_mb: float = 0
    fast_revisions: int = 0
    fast_max_lag_ms: float = 0
    slow_resynced: bool = False
    #: the slow reader was instead dropped by the server's WebSocket keepalive (uvicorn pings
    #: every 20 s and closes after 20 s without a pong, which a reader of nothing cannot send)
    slow_dropped: bool = False
    turns: int = 0  # turns streamed into the standing subscribers' sessions
    #: (seconds since the load started, server RSS in MB), every RSS_EVERY seconds
    rss_samples: list[tuple[float, float]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


async def ws_open(base: str, **kwargs: Any) -> ClientConnection:
    # No client keepalive: a loaded test process would time its own pings out (and the slow
    # reader, which reads nothing, cannot read pongs); the server is what is under test.
    kwargs.setdefault("ping_interval", None)
    ws = await connect(
        base.replace("http://", "ws://") + "/graphql",
        subprotocols=[PROTOCOL],  # type: ignore[list-item]
        open_timeout=10,
        **kwargs,
    )
    await ws.send(json.dumps({"type": "connection_init", "payload": {}}))
    ack = json.loads(await within(ws.recv(), 10))
    assert ack["type"] == "connection_ack", ack
    return ws


async def ws_subscribe(ws: ClientConnection, op_id: str, query: str, sid: str) -> None:
    message = {
        "id": op_id,
        "type": "subscribe",
        "payload": {"query": query, "variables": {"s": sid}},
    }
    await ws.send(json.dumps(message))


def abort(ws: ClientConnection) -> None:
    """Drop the connection: no ``complete``, no close frame."""
    ws.transport.abort()


class Load:
    def __init__(self, base: str, sessions: list[str], figures: SoakFigures, seed: int) -> None:
        self.base = base
        self.sessions = sessions
        self.figures = figures
        self.rng = random.Random(seed)
        self.open = 0

    def _opened(self) -> None:
        self.open += 1
        self.figures.connections += 1
        self.figures.peak_open = max(self.figures.peak_open, self.open)

    async def churn(self, until: float) -> None:
        """Connect, subscribe, maybe read, disconnect (mostly abruptly), again and again."""
        loop = asyncio.get_running_loop()
        while loop.time() < until:
            style = self.rng.randrange(4)
            ws = await ws_open(self.base)
            self._opened()
            try:
                if style == 0:  # gone right after the handshake
                    abort(ws)
                    self.figures.aborted += 1
                    continue
                count = self.rng.randint(1, 4)
                for i in range(count):
                    query = self.rng.choice(SUBSCRIPTIONS)
                    await ws_subscribe(ws, str(i), query, self.rng.choice(self.sessions))
                self.figures.subscriptions += count
                if style == 1:  # subscribed, never read, dropped
                    abort(ws)
                    self.figures.aborted += 1
                    continue
                with contextlib.suppress(TimeoutError):
                    for _ in range(self.rng.randint(1, 3)):
                        frame = json.loads(await within(ws.recv(), 2))
                        assert frame["type"] in ("next", "error", "complete"), frame
                        self.figures.deliveries += 1
                if style == 2:
                    abort(ws)
                    self.figures.aborted += 1
                else:  # the polite way
                    for i in range(count):
                        await ws.send(json.dumps({"id": str(i), "type": "complete"}))
                    await ws.close()
            finally:
                self.open -= 1

    async def standing(self, until: float) -> None:
        """A subscriber that stays for the whole phase, reading everything, then drops."""
        ws = await ws_open(self.base)
        self._opened()
        try:
            sid = self.rng.choice(self.sessions)
            for i, query in enumerate(SUBSCRIPTIONS):  # every field
                await ws_subscribe(ws, str(i), query, sid)
            self.figures.subscriptions += len(SUBSCRIPTIONS)
            loop = asyncio.get_running_loop()
            while (left := until - loop.time()) > 0:
                with contextlib.suppress(TimeoutError):
                    frame = json.loads(await within(ws.recv(), left))
                    if frame["type"] == "error":
                        self.figures.errors.append(json.dumps(frame)[:300])
                    self.figures.deliveries += 1
            abort(ws)
            self.figures.aborted += 1
        finally:
            self.open -= 1

    async def mutate(self, client: Client, until: float) -> None:
        """Enqueue and remove on paused sessions; send prompts to the others (turn output)."""
        loop = asyncio.get_running_loop()
        while loop.time() < until:
            sid = self.rng.choice(self.sessions)
            started = loop.time()
            payload = await client.mutate(
                "enqueueMessage", "entry { id }", sessionId=sid, content="x"
            )
            took = (loop.time() - started) * 1e3
            self.figures.mutation_max_ms = max(self.figures.mutation_max_ms, took)
            self.figures.mutations += 1
            if not payload["userErrors"] and self.rng.random() < 0.7:
                entry = payload["entry"]["id"]
                await client.mutate("removeQueueEntry", "__typename", sessionId=sid, entryId=entry)
                self.figures.mutations += 1
            if self.rng.random() < 0.1:
                await client.mutate("clearQueue", "__typename", sessionId=sid)
                self.figures.mutations += 1

    async def turns(self, client: Client, sid: str, until: float) -> None:
        """Turns into one session, one after the other: each streams its output (turnOutput)
        and moves the session and its queue (the standing subscribers' other fields)."""
        loop = asyncio.get_running_loop()
        while loop.time() < until:
            await client.ok("sendMessage", "__typename", sessionId=sid, content="hello")
            self.figures.turns += 1
            while loop.time() < until + 30:  # bounded: the scripted turn takes 0.5 s
                data = await client.data(SESSION_STATE, id=sid)
                if data["session"]["state"] != "RUNNING":
                    break
                await asyncio.sleep(0.1)


async def sample_rss(server: ProcServer, figures: SoakFigures, until: float) -> None:
    loop = asyncio.get_running_loop()
    started = loop.time()
    while True:
        figures.rss_samples.append(
            (round(loop.time() - started, 1), round(server.rss_bytes() / 2**20, 1))
        )
        if loop.time() >= until:
            return
        await asyncio.sleep(min(RSS_EVERY, max(0.0, until - loop.time())))


async def server_gauges(client: Client, server: ProcServer) -> tuple[float, float, int]:
    page = await client.metrics()
    return (
        page.value("turnqueue_asyncio_tasks"),
        page.value("turnqueue_subscriptions"),
        server.rss_bytes(),
    )


def tcp_send_buffer_bytes() -> int:
    """The most the server's end of a loopback TCP connection can buffer (autotuned)."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        return int(Path("/proc/sys/net/ipv4/tcp_wmem").read_text().split()[2])
    return 8 * 2**20


async def small_buffer_socket(base: str) -> socket.socket:
    """A connected socket whose receive buffer is pinned small (no autotuning): a slow
    reader then fills TCP's buffers after a few frames instead of tens of megabytes."""
    port = int(base.rsplit(":", 1)[1])
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port))
    return sock


async def slow_and_fast(client: Client, base: str, figures: SoakFigures, steps: int) -> None:
    """A reader of nothing and a fast reader of one session's big queue status (R3).

    The slow reader's server-side sender blocks once TCP's buffers are full; the bus then
    overflows its bounded buffer and marks it lagged. ``steps`` is raised so that the volume
    sent surely exceeds what TCP can hold (10 entries of 20 kB: ~200 kB per frame)."""
    steps = max(steps, 2 * tcp_send_buffer_bytes() // 200_000 + 64)
    sid = await client.create_session()
    await client.ok("setAutoRun", "dispatched", sessionId=sid, autoRun=False)
    # Incompressible, so permessage-deflate cannot hide the volume from TCP's buffers.
    block = os.urandom(10_000).hex()
    ids = []
    for i in range(10):
        payload = await client.ok(
            "enqueueMessage", "entry { id }", sessionId=sid, content=f"{i}{block}"
        )
        ids.append(payload["entry"]["id"])
    # The slow reader lets the websockets client queue one frame, then TCP fills up.
    slow = await ws_open(
        base, max_queue=1, max_size=None, compression=None, sock=await small_buffer_socket(base)
    )
    fast = await ws_open(base, max_size=None)
    try:
        await ws_subscribe(slow, "1", BIG_SUB, sid)
        await ws_subscribe(fast, "1", BIG_SUB, sid)
        seen: list[int] = []
        first = json.loads(await within(fast.recv(), 10))
        seen.append(first["payload"]["data"]["queueStatusChanged"]["revision"])
        loop = asyncio.get_running_loop()
        for step in range(steps):
            started = loop.time()
            payload = await client.ok(
                "updateQueueEntry", "queue { revision }", sessionId=sid, entryId=ids[step % 10],
                content=f"{step}{block}",
            )  # fmt: skip
            revision = payload["queue"]["revision"]
            while seen[-1] < revision:  # lockstep: a stalled fast reader times out here
                frame = json.loads(await within(fast.recv(), 20))
                assert frame["type"] == "next", ("the fast reader was cut off", frame)
                seen.append(frame["payload"]["data"]["queueStatusChanged"]["revision"])
            assert seen[-1] == revision, ("R3: a revision was skipped", seen[-3:], revision)
            figures.fast_max_lag_ms = max(figures.fast_max_lag_ms, (loop.time() - started) * 1e3)
        assert seen == sorted(set(seen)), "R3: revisions went back or repeated"
        figures.fast_revisions = len(seen)
        # The slow reader now reads: what it was sent before it fell behind, then RESYNC
        # (an execution error in a ``next`` frame, then ``complete``: graphql-transport-ws).
        for _ in range(steps + 2):
            try:
                frame = json.loads(await within(slow.recv(), 10))
            except ConnectionClosed:
                figures.slow_dropped = True
                break
            assert frame["type"] == "next", ("ended without RESYNC", frame)
            errors = frame["payload"].get("errors")
            if errors:
                assert errors[0]["extensions"]["code"] == "RESYNC", frame
                figures.slow_resynced = True
                end = json.loads(await within(slow.recv(), 10))
                assert end["type"] == "complete", end
                break
    finally:
        abort(slow)
        await fast.close()


async def soak(
    server: ProcServer,
    seconds: float,
    standing: int = 200,
    churners: int = 20,
    slow_steps: int = 120,
    seed: int = 7,
) -> SoakFigures:
    figures = SoakFigures(seconds=seconds)
    client = server.client()
    loop = asyncio.get_running_loop()
    try:
        sessions = [await client.create_session() for _ in range(10)]
        for sid in sessions[:6]:  # these accumulate and clear entries; the rest run turns
            await client.ok("setAutoRun", "dispatched", sessionId=sid, autoRun=False)
        load = Load(server.base, sessions, figures, seed)
        # Warm up every code path once, then take the baseline.
        await asyncio.gather(*(load.churn(loop.time() + 1.0) for _ in range(5)))
        await _settled(client, server, None)
        tasks0, subs0, rss0 = await server_gauges(client, server)
        figures.tasks_before, figures.rss_before_mb = tasks0, rss0 / 2**20

        until = loop.time() + seconds
        await asyncio.gather(
            sample_rss(server, figures, until),
            *(load.standing(until) for _ in range(standing)),
            *(load.churn(until) for _ in range(churners)),
            *(load.turns(client, sid, until) for sid in sessions[6:]),
            load.mutate(client, until),
            slow_and_fast(client, server.base, figures, slow_steps),
        )
        tasks, subs, _ = await _settled(client, server, (tasks0, subs0))
        figures.tasks_after, figures.subscriptions_after = tasks, subs
        figures.rss_after_mb = server.rss_bytes() / 2**20
    finally:
        await client.aclose()
    return figures


async def _settled(
    client: Client, server: ProcServer, baseline: tuple[float, float] | None
) -> tuple[float, float, int]:
    """Poll the server's gauges until it is quiet (and back to ``baseline``)."""
    last: list[tuple[float, float, int]] = []

    async def quiet() -> bool:
        gauges = await server_gauges(client, server)
        last.append(gauges)
        tasks, subs, _ = gauges
        if baseline is None:
            return subs == 0 and len(last) > 1 and last[-2][0] == tasks
        return subs <= baseline[1] and tasks <= baseline[0] + TASK_MARGIN

    with contextlib.suppress(AssertionError):
        await poll(quiet, "the server's tasks and subscriptions to settle", 20, 0.25)
    return last[-1]


@pytest.mark.timeout(SOAK_SECONDS + 150)
async def test_r3_s3_u3_soak_subscribers_churn_without_leaks(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'soak.db'}"
    server = ProcServer(
        db,
        tmp_path / "soak.log",
        TURNQUEUE_SUBSCRIBER_BUFFER="16",
        TURNQUEUE_SCRIPTED_TURN_SECONDS="0.5",
        TURNQUEUE_LOG_LEVEL="WARNING",
    )
    await server.start()
    try:
        figures = await soak(server, SOAK_SECONDS)
    finally:
        server.stop()
    print(f"\nSOAK-FIGURES {json.dumps(vars(figures))}")
    assert not problems(figures, min_connections=300, may_drop_slow=False), vars(figures)


def problems(figures: SoakFigures, min_connections: int, may_drop_slow: bool) -> list[str]:
    """What is wrong after a soak (empty when it passed); shared with ``scripts/soak.py``."""
    found = []
    if figures.errors:
        found.append(f"subscribers got errors: {figures.errors[:3]}")
    if figures.connections < min_connections or figures.peak_open < 200:
        found.append("the load was smaller than asked")
    if figures.subscriptions_after != 0:
        found.append(f"{figures.subscriptions_after} subscriptions left behind")
    if figures.tasks_after > figures.tasks_before + TASK_MARGIN:
        found.append(f"task leak: {figures.tasks_before} -> {figures.tasks_after}")
    if figures.rss_after_mb * 2**20 > figures.rss_before_mb * 2**20 + RSS_MARGIN:
        found.append(f"memory grew: {figures.rss_before_mb} -> {figures.rss_after_mb} MB")
    if figures.fast_revisions < 100:
        found.append("the fast reader fell short")
    if not (figures.slow_resynced or (may_drop_slow and figures.slow_dropped)):
        found.append("the slow reader was neither resynced nor dropped")
    return found


@pytest.mark.parametrize("script", ["soak.py", "reliability.py"])
def test_the_reliability_scripts_import_what_they_use(script: str) -> None:
    """``scripts/`` reuse these tests' helpers outside pytest: they must still import them
    (``scripts/soak.py`` once broke when the shared client moved to ``tests/clients.py``)."""
    import subprocess
    import sys

    repo = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, str(repo / "scripts" / script), "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
