"""P4: ``setAutoRun`` over HTTP with 2 concurrent clients, requests/s.

The server (bench/server.py) runs in a subprocess; each client has its own keep-alive
connection and session and alternates OFF/ON, so every request writes the policy and bumps the
queue revision (and ON runs an automatic drain of the empty queue). Baseline, same server, same
run: ``POST /bench/plain/set-auto-run``, a plain Starlette JSON endpoint making the same engine
call and the same queue read as the mutation's resolver, without GraphQL.
"""

from __future__ import annotations

import asyncio
import json
import time

from bench.common import Backend, Config, RawHttp, Row, ServerProcess, median

CLIENTS = 2
MUTATION = """mutation($input: SetAutoRunInput!) { setAutoRun(input: $input) {
  dispatched queue { revision autoRun pauseReason heldBy count } userErrors { code message } } }"""


def _graphql_body(sid: str, on: bool) -> bytes:
    variables = {"input": {"sessionId": sid, "autoRun": on}}
    return json.dumps({"query": MUTATION, "variables": variables}).encode()


def _plain_body(sid: str, on: bool) -> bytes:
    return json.dumps({"sessionId": sid, "autoRun": on}).encode()


async def _rate(port: int, path: str, sessions: list[str], requests: int, graphql: bool) -> float:
    async def client(sid: str) -> None:
        bodies = [(_graphql_body if graphql else _plain_body)(sid, on) for on in (False, True)]
        async with RawHttp(port) as http:
            for i in range(requests):
                status, data = await http.post(path, bodies[i % 2])
                if status != 200 or (graphql and b'"userErrors":[]' not in data):
                    raise RuntimeError(f"{path} answered {status}: {data[:300]!r}")

    started = time.perf_counter()
    await asyncio.wait_for(asyncio.gather(*(client(s) for s in sessions)), 600)
    return CLIENTS * requests / (time.perf_counter() - started)


async def run(backend: Backend, cfg: Config) -> list[Row]:
    requests = cfg.n(10, 400)
    ours: list[float] = []
    base: list[float] = []
    async with backend.database() as url, ServerProcess(url) as server:
        setup = await server.call("/bench/setup", json.dumps({"sessions": CLIENTS}).encode())
        sessions = [s["id"] for s in setup["sessions"]]
        await _rate(server.port, "/graphql", sessions, 3, True)  # warm-up
        await _rate(server.port, "/bench/plain/set-auto-run", sessions, 3, False)
        for rep in range(cfg.reps):
            steps = [(ours, "/graphql", True), (base, "/bench/plain/set-auto-run", False)]
            for sink, path, graphql in steps if rep % 2 == 0 else steps[::-1]:
                sink.append(await _rate(server.port, path, sessions, requests, graphql))
    return [
        Row(
            "P4",
            f"setAutoRun requests/s over HTTP, {CLIENTS} clients "
            "(vs plain Starlette JSON endpoint)",
            "/s",
            median(ours),
            median(base),
            "ratio>=",
            0.5,
        )
    ]
