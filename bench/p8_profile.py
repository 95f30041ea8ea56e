"""A P8 probe (issue 13), not a benchmark row yet: one ``queueStatusChanged`` watcher per session,
each event a ``setAutoRun`` toggle through the engine (``/bench/events``), with the server's
pyinstrument profile and its CPU time per event (psutil; the profiler's own cost included).

``python -m bench.p8_profile --db sqlite:///… --out profile.txt [--fanout false]
[--sessions 50] [--events 40]`` (the database must be migrated: ``./tq migrate``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time

import psutil

from bench.common import ServerProcess
from bench.p7_events import FIELDS, _events, _open
from bench.wslib import close_all


async def profile(url: str, out: str, fanout: bool, sessions: int, events: int) -> str:
    kind = FIELDS["queueStatusChanged"][0]
    env = {"TURNQUEUE_SUBSCRIPTION_FANOUT": "true" if fanout else "false"}
    async with ServerProcess(url, env) as server:
        setup = await server.call("/bench/setup", json.dumps({"sessions": sessions}).encode())
        sids = [s["id"] for s in setup["sessions"]]
        clients = {sid: await _open(server.port, "queueStatusChanged", sid) for sid in sids}
        try:
            for client in clients.values():
                await client.until(0)
            for sid in sids:  # warm-up
                await _events(server, [clients[sid]], sid, kind, 0, 4)
            proc = psutil.Process(server.pid)
            await server.call("/bench/profile/start")
            before, started = proc.cpu_times(), time.perf_counter()
            for sid in sids:
                await _events(server, [clients[sid]], sid, kind, 4, events)
            after, wall = proc.cpu_times(), time.perf_counter() - started
            await server.call("/bench/profile/stop", json.dumps({"path": out}).encode())
        finally:
            await close_all([c.ws for c in clients.values()])
            for c in clients.values():
                c.task.cancel()
    n = sessions * events
    cpu = after.user + after.system - before.user - before.system
    return (
        f"queueStatusChanged, fan-out {'on' if fanout else 'off'}: server CPU "
        f"{cpu / n * 1e6:,.0f} µs per event (profiler included), {n:,} events, {wall:.1f} s"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--fanout", default="true", choices=["true", "false"])
    parser.add_argument("--sessions", type=int, default=50)
    parser.add_argument("--events", type=int, default=40)
    args = parser.parse_args()
    print(
        asyncio.run(profile(args.db, args.out, args.fanout == "true", args.sessions, args.events))
    )


if __name__ == "__main__":
    main()
