"""CPU time per P1 reservation, the store's and the raw ``sqlite3`` baseline's, alternating.

Run from a tree (``git archive`` of a commit) with that tree first on ``PYTHONPATH``:
``python cpu_p1.py``. ROUNDS rounds of PER reservations per session each side (ours first in
even rounds, the baseline first in odd ones), ``time.process_time`` around each; prints each
side's median µs per reservation and the median of the per-round ratios (baseline / ours).
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from bench.common import Backend, seed_sessions
from bench.p1_reservation import SESSIONS, _drive, _sqlite_connect, _sqlite_reserver, q3_store
from turnqueue.settings import Settings
from turnqueue.store.sql import open_store

ROUNDS, PER, WARM = 9, 100, 10


async def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        async with Backend("sqlite", None, Path(tmp)).database() as url:
            total = WARM + ROUNDS * PER
            ours_work = await seed_sessions(url, SESSIONS, entries=total)
            base_work = await seed_sessions(url, SESSIONS, entries=total)
            store = await open_store(Settings(database_url=url))
            conn = _sqlite_connect(Path(url.removeprefix("sqlite:///")))
            one = _sqlite_reserver(conn)

            async def ours(n: int) -> float:
                started = time.process_time()
                await _drive(ours_work, n, lambda s: q3_store(store, s))
                return (time.process_time() - started) / (n * SESSIONS)

            def base(n: int) -> float:
                started = time.process_time()
                for _ in range(n):
                    for sid in base_work:
                        assert one(sid)
                return (time.process_time() - started) / (n * SESSIONS)

            await ours(WARM)
            base(WARM)
            o, b = [], []
            for i in range(ROUNDS):
                if i % 2 == 0:
                    o.append(await ours(PER))
                    b.append(base(PER))
                else:
                    b.append(base(PER))
                    o.append(await ours(PER))
            conn.close()
            await store.close()
    ratios = [bb / oo for oo, bb in zip(o, b, strict=True)]
    print(
        f"ours {statistics.median(o) * 1e6:.0f} us, baseline {statistics.median(b) * 1e6:.0f} us"
        f" per reservation; ratio median {statistics.median(ratios):.3f}"
        f" (min {min(ratios):.3f}, max {max(ratios):.3f})"
    )


if __name__ == "__main__":
    asyncio.run(main())
