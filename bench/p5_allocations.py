"""P5b's investigation: where a standing subscription's memory goes.

``python -m bench.p5_allocations [N]`` starts the bench server under ``tracemalloc`` (one frame),
opens 20 warm-up subscriptions and then N more (400 by default), each on its own session (as
P5b), and prints the server's RSS growth per subscription and the 20 source lines whose live
allocations grew most (``/bench/allocations``). Not a benchmark: tracemalloc slows the server.
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile

from bench.common import ServerProcess
from bench.wslib import _open_tq, close_all, open_many

WARM_UP = 20


async def main(n: int) -> None:
    with tempfile.TemporaryDirectory() as workdir:
        url = f"sqlite:///{workdir}/p5b.db"
        async with ServerProcess(url, env={"PYTHONTRACEMALLOC": "1"}) as server:
            sessions: list[str] = []
            while len(sessions) < WARM_UP + n:
                body = json.dumps({"sessions": 50, "entries": 3}).encode()
                sessions += [s["id"] for s in (await server.call("/bench/setup", body))["sessions"]]
            opened = await open_many(_open_tq, server.port, sessions[:WARM_UP], WARM_UP)
            try:
                await server.call("/bench/allocations")  # the first call takes the snapshot
                before = (await server.call("/bench/gc"))["rss"]
                opened += await open_many(_open_tq, server.port, sessions[WARM_UP:], n)
                after = (await server.call("/bench/gc"))["rss"]
                top = (await server.call("/bench/allocations"))["top"]
            finally:
                await close_all(opened)
    print(f"server RSS per subscription: {(after - before) / n / 1024:.1f} KiB")
    print("\n".join(top))


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 400))
