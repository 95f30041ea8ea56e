"""P8 (issue 13): one ``queueStatusChanged`` watcher per session; server CPU per event, i.e. per
(mutation + its delivery), against a bare baseline.

The server (bench/server.py) runs in a subprocess. S sessions (500; 20 in smoke) each have one
subscriber, a raw-socket reader in a process of its own (``bench/wsreader.py``), so the clients
do not cap the server. One event = one ``setAutoRun`` toggle of one session over HTTP (raw
keep-alive HTTP/1.1, 2 clients each toggling its half of the sessions one after the other); a
round toggles every session once, and the measured window (2 rounds: ON, then OFF) ends when
every watcher has read its session's last revision. Server CPU is psutil's user + system time
of the server process over the window, divided by the number of events. Two untimed rounds
first (caches, connections).

Baseline, same server, same run (issue 27): what the same job costs without turnqueue — P4's
hand-written endpoint (``/bench/handwritten/set-auto-run``: the job's own SQL on the raw
driver) encoding the new status once as a ``queueStatusChanged`` payload and sending it in a
``next`` frame to the session's one bare Starlette WebSocket (``/bench/ws?key=h<i>``), read the
same way.

Informative row (issue 13's baseline): the replay of the mutation's own recorded statements
(``/bench/replay/set-auto-run``) followed by a bare send of the very payload a watcher
received (``/bench/ws?key=<i>``).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from typing import Any

import psutil

from bench.common import WAIT, Backend, Config, RawHttp, Row, ServerProcess, median
from bench.p4_http import (
    GRAPHQL,
    HANDWRITTEN,
    HANDWRITTEN_STATEMENTS,
    REPLAY,
    graphql_body,
    record_mutation,
    set_auto_run,
)
from bench.p7_events import FIELDS
from bench.wsreader import Readers, Spec, payload_of
from turnqueue.timeouts import within

CLIENTS = 2
ROUNDS = 2  # measured: ON, then OFF (auto-run is OFF after the set-up and after each pair)
SETUP_SLICE = 100


async def sessions_of(server: ServerProcess, count: int) -> list[str]:
    """``count`` fresh sessions, created in slices (each call stays well inside WAIT)."""
    ids: list[str] = []
    while len(ids) < count:
        body = {"sessions": min(SETUP_SLICE, count - len(ids))}
        setup = await server.call("/bench/setup", json.dumps(body).encode())
        ids += [s["id"] for s in setup["sessions"]]
    return ids


class Side:
    """One side: its sessions, its readers, how a toggle is sent and what it must deliver."""

    def __init__(
        self,
        server: ServerProcess,
        readers: Readers,
        path: str,
        sessions: list[str],
        body: Callable[[int, bool], bytes],
    ) -> None:
        self.server = server
        self.readers = readers
        self.path = path
        self.sessions = sessions
        self.body = body
        self.sample = ""

    async def round(self, on: bool) -> dict[int, int]:
        """Toggle every session once; answers the revision each watcher must reach (turnqueue)."""
        targets: dict[int, int] = {}

        async def client(first: int) -> None:
            async with RawHttp(self.server.port) as http:
                for i in range(first, len(self.sessions), CLIENTS):
                    status, data = await http.post(self.path, self.body(i, on))
                    if status != 200 or b'"userErrors":[]' not in data:
                        raise RuntimeError(f"{self.path} answered {status}: {data[:300]!r}")
                    if self.path == GRAPHQL:
                        targets[i] = json.loads(data)["data"]["setAutoRun"]["queue"]["revision"]

        await within(asyncio.gather(*(client(c) for c in range(CLIENTS))), 600)
        return targets

    async def delivered(self, targets: dict[int, int], expected: int) -> int:
        """Wait until every watcher read its target revision (turnqueue: a watcher that fell
        behind may skip to the newest state) or ``expected`` frames arrived (bare); frames read."""
        seen: dict[int, int] = {}
        frames = 0
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline:
            left = deadline - time.monotonic()
            got = await self.readers.wait(max(1, expected - frames), max(0.0, left))
            if got.errors:
                raise RuntimeError(f"{got.errors} error frames: {got.sample[:300]}")
            self.sample = self.sample or got.sample
            frames += len(got.ts)
            for conn, rev in zip(got.conn, got.rev, strict=True):
                seen[conn] = max(seen.get(conn, -1), rev)
            if targets and all(seen.get(i, -1) >= rev for i, rev in targets.items()):
                return frames
            if not targets and frames >= expected:
                return frames
        raise RuntimeError(f"only {frames} of {expected} deliveries in {WAIT} s")

    async def rounds(self, count: int) -> float:
        """``count`` rounds; server CPU µs per event."""
        process = psutil.Process(self.server.pid)
        before = process.cpu_times()
        for r in range(count):
            targets = await self.round(r % 2 == 0)
            await self.delivered(targets, len(self.sessions))
        after = process.cpu_times()
        cpu = max(0.0, after.user + after.system - before.user - before.system)
        return float(cpu / (count * len(self.sessions)) * 1e6)


async def run(backend: Backend, cfg: Config) -> list[Row]:
    n = cfg.n(20, 500)
    _kind, query, _marker = FIELDS["queueStatusChanged"]
    results: dict[str, list[float]] = {"tq": [], "hand": [], "bare": []}
    recorded: dict[str, Any] = {}
    async with backend.database() as url, ServerProcess(url) as server:
        ours, theirs = await sessions_of(server, n), await sessions_of(server, n)
        hand = await sessions_of(server, n)
        recorded = await record_mutation(server, ours[0])  # leaves ours[0] ON

        def tq_body(i: int, on: bool) -> bytes:
            return graphql_body(ours[i], on)

        def bare_body(i: int, on: bool) -> bytes:
            return json.dumps({"sessionId": theirs[i], "autoRun": on, "notify": i}).encode()

        def hand_body(i: int, on: bool) -> bytes:
            return json.dumps({"sessionId": hand[i], "autoRun": on, "notify": f"h{i}"}).encode()

        tq_spec = Spec(server.port, "/graphql", n, query, ours)
        bare_spec = Spec(server.port, "/bench/ws", n, keyed=True)
        hand_spec = Spec(server.port, "/bench/ws", n, keyed=True, key_prefix="h")
        async with (
            Readers(tq_spec) as tq_readers,
            Readers(bare_spec) as bare_readers,
            Readers(hand_spec) as hand_readers,
        ):
            tq = Side(server, tq_readers, GRAPHQL, ours, tq_body)
            bare = Side(server, bare_readers, REPLAY, theirs, bare_body)
            handwritten = Side(server, hand_readers, HANDWRITTEN, hand, hand_body)
            # ours[0] was left ON by the recording: OFF first, so every round toggles each.
            await set_auto_run(server.port, ours[0], False)
            await tq.delivered({}, 1)
            await tq.rounds(2)  # warm-up; its first frame is the payload the baseline sends
            await server.call("/bench/bare-frame", payload_of(tq.sample))
            await bare.rounds(2)
            await handwritten.rounds(2)
            sides = [("tq", tq), ("hand", handwritten), ("bare", bare)]
            for rep in range(cfg.reps):
                for name, side in sides[:: 1 if rep % 2 == 0 else -1]:
                    results[name].append(await side.rounds(ROUNDS))
    statements = sum(len(tx["statements"]) for tx in recorded["on"]["transactions"])
    what = "server CPU per setAutoRun + its delivery, one queueStatusChanged watcher per session, "
    return [
        Row(
            "P8",
            f"{what}{n:,} sessions (vs hand-written SQL + bare WebSocket send)",
            "µs",
            median(results["tq"]),
            median(results["hand"]),
            "ratio<=",
            3.0,
            note=f"baseline: the job's own SQL by hand, {HANDWRITTEN_STATEMENTS[backend.name]}, "
            "and the status encoded once and sent",
        ),
        Row(
            "P8",
            f"{what}{n:,} sessions (vs plain endpoint's write + bare WebSocket send)",
            "µs",
            median(results["tq"]),
            median(results["bare"]),
            "info",
            note=f"baseline write: the mutation's statements replayed ({statements} for ON)",
        ),
    ]
