"""P4 (re-based, issue 13; against the job, issue 27): ``setAutoRun`` over HTTP with 2 concurrent
clients: server CPU per request and requests/s, against a plain Starlette endpoint doing the
same job with hand-written SQL.

The server (bench/server.py) runs in a subprocess; each client has its own keep-alive connection
(a raw HTTP/1.1 client: httpx costs more CPU than the server) and session, and alternates
OFF/ON, so every request writes the policy and bumps the queue revision (and ON runs an
automatic drain of the empty queue). Server CPU is psutil's user + system time of the server
process over the measured requests.

Baseline, same server, same run: ``POST /bench/handwritten/set-auto-run``
(``bench/handwritten.py``), the job written by hand on the raw driver — check the caller owns
the session, write the policy and the revision, answer the status with its entries, in one
transaction (SQLite: ``sqlite3`` on the event loop, as the store's writer; PostgreSQL: an
asyncpg pool, as the store's) — answering JSON of the mutation's shape. It measures what
turnqueue adds to the job, statements it does not need included.

Informative rows:

* ``POST /bench/replay/set-auto-run`` (``bench/baseline.py``, issue 13) replays **the
  statements the mutation itself sent**: before the measurement, one ``setAutoRun`` OFF and one
  ON are sent to turnqueue while the server records every statement its store sends
  (``bench/sqlrecord.py``); the baseline replays exactly those (same texts, same parameters,
  same transactions, the session id swapped for its own session) on a raw driver connection.
  It follows the engine (fewer statements, cheaper baseline), so it measures what turnqueue
  adds around its SQL, not the SQL it could spare. The recording is taken twice and must agree.
* ``POST /bench/plain/set-auto-run``, the old baseline (before issue 13): a plain endpoint making
  the same *engine* call and queue read as the resolver (it measures GraphQL's share only).
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Callable
from typing import Any

import psutil

from bench.common import Backend, Config, RawHttp, Row, ServerProcess, median, post_json
from turnqueue.timeouts import within

CLIENTS = 2
MUTATION = """mutation($input: SetAutoRunInput!) { setAutoRun(input: $input) {
  dispatched queue { revision autoRun pauseReason heldBy count } userErrors { code message } } }"""
GRAPHQL = "/graphql"
REPLAY = "/bench/replay/set-auto-run"
HANDWRITTEN = "/bench/handwritten/set-auto-run"
OLD = "/bench/plain/set-auto-run"
ATTEMPTS = 3
#: What the hand-written baseline sends per request (``bench/handwritten.py``).
HANDWRITTEN_STATEMENTS = {
    "sqlite": "6 statements (BEGIN IMMEDIATE, locked read, policy, revision, entries, COMMIT)",
    "postgresql": "5 statements (BEGIN, read FOR UPDATE, policy + revision in one WITH, "
    "entries, COMMIT)",
}


def graphql_body(sid: str, on: bool) -> bytes:
    variables = {"input": {"sessionId": sid, "autoRun": on}}
    return json.dumps({"query": MUTATION, "variables": variables}).encode()


def plain_body(sid: str, on: bool) -> bytes:
    return json.dumps({"sessionId": sid, "autoRun": on}).encode()


async def set_auto_run(port: int, sid: str, on: bool) -> bytes:
    status, data = await post_json(port, GRAPHQL, graphql_body(sid, on))
    if status != 200 or b'"userErrors":[]' not in data:
        raise RuntimeError(f"setAutoRun answered {status}: {data[:300]!r}")
    return data


async def record_mutation(server: ServerProcess, sid: str) -> dict[str, Any]:
    """Record the statements of one ``setAutoRun`` OFF and one ON on ``sid`` (warmed up first,
    auto-run left ON) and keep them for the replay baseline; answers the recordings by name.
    Recorded twice; both must send the same statement texts (a write by anything else in
    between would show), else it is tried again (at most ``ATTEMPTS`` times)."""
    for on in (True, False, True):  # warm-up: caches, connections; ends ON so OFF writes
        await set_auto_run(server.port, sid, on)
    texts: list[list[list[list[str]]]] = []
    for _ in range(ATTEMPTS * 2):
        kept: dict[str, Any] = {}
        for on in (False, True):
            name = "on" if on else "off"
            await server.call("/bench/record/start")
            answer = json.loads(await set_auto_run(server.port, sid, on))
            body = {"keep": name, "session": sid, "answer": answer}
            kept[name] = await server.call("/bench/record/stop", json.dumps(body).encode())
        texts.append([_texts(kept["off"]), _texts(kept["on"])])
        if len(texts) >= 2 and texts[-1] == texts[-2]:
            return kept
    raise RuntimeError(f"the mutation's statements differ between recordings: {texts[-2:]}")


def _texts(recording: dict[str, Any]) -> list[list[str]]:
    """The statement texts, the literals of simple queries masked (they are those statements'
    parameters: PostgreSQL's NOTIFY payloads carry each request's revision)."""
    return [
        [_LITERAL.sub("E'?'", s["sql"]) for s in tx["statements"]]
        for tx in recording["transactions"]
    ]


_LITERAL = re.compile(r"E'(?:[^']|'')*'")


def statement_count(recording: dict[str, Any]) -> int:
    return sum(len(tx["statements"]) for tx in recording["transactions"])


async def measure(
    server: ServerProcess,
    path: str,
    sessions: list[str],
    requests: int,
    body: Callable[[str, bool], bytes],
) -> tuple[float, float]:
    """Requests/s and server CPU µs per request: ``requests`` per client, alternating OFF/ON."""
    check = b'"userErrors":[]' if path == GRAPHQL else b""

    async def client(sid: str) -> None:
        bodies = [body(sid, on) for on in (False, True)]
        async with RawHttp(server.port) as http:
            for i in range(requests):
                status, data = await http.post(path, bodies[i % 2])
                if status != 200 or check not in data:
                    raise RuntimeError(f"{path} answered {status}: {data[:300]!r}")

    process = psutil.Process(server.pid)
    before, started = process.cpu_times(), time.perf_counter()
    await within(asyncio.gather(*(client(s) for s in sessions)), 600)
    wall, after = time.perf_counter() - started, process.cpu_times()
    total = len(sessions) * requests
    cpu = max(0.0, after.user + after.system - before.user - before.system)
    return total / wall, cpu / total * 1e6


async def run(backend: Backend, cfg: Config) -> list[Row]:
    requests = cfg.n(10, 500)
    results: dict[str, list[tuple[float, float]]] = {
        GRAPHQL: [],
        HANDWRITTEN: [],
        REPLAY: [],
        OLD: [],
    }
    async with backend.database() as url, ServerProcess(url) as server:
        setup = await server.call("/bench/setup", json.dumps({"sessions": 3 * CLIENTS}).encode())
        ids = [s["id"] for s in setup["sessions"]]
        # each baseline writes sessions of its own
        ours, theirs, hand = ids[:CLIENTS], ids[CLIENTS : 2 * CLIENTS], ids[2 * CLIENTS :]
        recorded = await record_mutation(server, ours[0])
        sides = [
            (GRAPHQL, ours, graphql_body),
            (HANDWRITTEN, hand, plain_body),
            (REPLAY, theirs, plain_body),
            (OLD, ours, plain_body),
        ]
        for path, sessions, body in sides:  # warm-up
            await measure(server, path, sessions, 4, body)
        for rep in range(cfg.reps):
            for path, sessions, body in sides if rep % 2 == 0 else sides[::-1]:
                results[path].append(await measure(server, path, sessions, requests, body))

    def med(path: str, index: int) -> float:
        return median([r[index] for r in results[path]])

    counts = "/".join(str(statement_count(recorded[k])) for k in ("off", "on"))
    unmatched = sum(int(recorded[k]["unmatched"]) for k in ("off", "on"))
    note = f"baseline replays the mutation's {counts} statements (OFF/ON) on the raw driver" + (
        f"; {unmatched} with inlined parameters" if unmatched else ""
    )
    what = f"setAutoRun over HTTP, {CLIENTS} clients"
    hand_note = f"baseline: the job's own SQL by hand, {HANDWRITTEN_STATEMENTS[backend.name]}"
    return [
        Row(
            "P4",
            f"server CPU per request, {what} (vs plain endpoint, hand-written SQL)",
            "µs",
            med(GRAPHQL, 1),
            med(HANDWRITTEN, 1),
            "ratio<=",
            3.0,
            note=hand_note,
        ),
        Row(
            "P4",
            f"requests/s, {what} (vs plain endpoint, hand-written SQL)",
            "/s",
            med(GRAPHQL, 0),
            med(HANDWRITTEN, 0),
            "ratio>=",
            0.4,
        ),
        Row(
            "P4",
            f"server CPU per request, {what} (vs plain endpoint, same SQL)",
            "µs",
            med(GRAPHQL, 1),
            med(REPLAY, 1),
            "info",
            note=note,
        ),
        Row(
            "P4",
            f"requests/s, {what} (vs plain endpoint, same SQL)",
            "/s",
            med(GRAPHQL, 0),
            med(REPLAY, 0),
            "info",
        ),
        Row(
            "P4",
            f"requests/s, {what} (vs the old baseline: same engine call, no GraphQL)",
            "/s",
            med(GRAPHQL, 0),
            med(OLD, 0),
            "info",
            note=f"old baseline's CPU {med(OLD, 1):,.0f} µs/request",
        ),
    ]
