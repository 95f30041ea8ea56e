"""Probe: which object types a bench server keeps per zero-time turn (P7's turn row).

A fresh bench server on a fresh database and one session, FOLLOWERS standing session-following ``turnOutput`` subscriptions (P7's turn
row: bench/p7_events.py); zero-time turns in
windows of WINDOW, the server's garbage-collector-tracked objects counted per type after each
(``/bench/types``). Prints, per window, the total growth and the types that grew or shrank most.

    PYTHONPATH=. TURNQUEUE_TEST_DATABASE_URL=postgresql://postgres@127.0.0.1:5432/test \\
      python bench/results/2026-12-07-p7-objects/types_per_turn.py postgresql WINDOWS WINDOW FOLLOWERS
"""

import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path

from bench.common import ServerProcess, backends
from bench.p7_events import FIELDS, TURN_ENDS, Client, _events
from bench.wslib import close_all, subscribe


async def main(store: str, windows: int, window: int, followers: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        backend = next(b for b in backends(Path(tmp)) if b.name == store)
        async with backend.database() as url:
            env = {"TURNQUEUE_SCRIPTED_TURN_SECONDS": "0"}
            async with ServerProcess(url, env) as server:
                setup = await server.call("/bench/setup", json.dumps({"sessions": 1}).encode())
                sid = setup["sessions"][0]["id"]
                clients = [
                    Client(
                        await subscribe(server.port, FIELDS["turnOutput"][1], sid), TURN_ENDS, True
                    )
                    for _ in range(followers)
                ]
                before = await server.call("/bench/types")
                start = time.monotonic()
                done = 0
                for w in range(windows):
                    await _events(server, clients, sid, "turns", done, window)
                    done += window
                    after = await server.call("/bench/types")
                    diff = {k: after.get(k, 0) - before.get(k, 0) for k in set(after) | set(before)}
                    total = sum(diff.values())
                    top = sorted(((v, k) for k, v in diff.items() if v), key=lambda x: -abs(x[0]))
                    conns = after.get("asyncpg.connection.Connection", 0)
                    print(
                        f"turns {done - window}-{done} (at {time.monotonic() - start:.1f} s): "
                        f"{total:+d} objects ({total / window:+.3f}/turn), "
                        f"{conns} asyncpg connections",
                        flush=True,
                    )
                    shown = [t for t in top if t[1].startswith(("asyncpg", "sqlalchemy"))]
                    for v, k in (top[:6] + [t for t in shown if t not in top[:6]])[:16]:
                        print(f"    {v:+6d} {k}", flush=True)
                    before = after
                await close_all([c.ws for c in clients])


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])))
