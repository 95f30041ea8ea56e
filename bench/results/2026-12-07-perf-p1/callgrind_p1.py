"""Instructions per P1 reservation under callgrind, the store's and the raw ``sqlite3`` baseline's.

Run from a tree (``git archive`` of a commit) with that tree first on ``PYTHONPATH``::

    valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file=OUT \
        python callgrind_p1.py store|raw|null|pgstore|pgraw TOGGLE_SO

``pgstore`` / ``pgraw``: the same on PostgreSQL (``TURNQUEUE_TEST_DATABASE_URL``; the client
process's instructions only, the server's are not counted; ``pgraw`` dumps its pool's opening
and closing apart, to subtract).

``TOGGLE_SO`` is a two-function library built from ``valgrind/callgrind.h``
(``cg_start`` = ``CALLGRIND_START_INSTRUMENTATION``, ``cg_stop`` = ``…STOP…``, see
``cgtoggle.c``): only the measured reservations are instrumented (after a warm-up of
``WARM`` per session); ``null`` measures the toggling alone, to subtract.
"""

from __future__ import annotations

import asyncio
import ctypes
import os
import sys
import tempfile
from pathlib import Path

from bench.common import Backend, seed_sessions
from bench.p1_reservation import (
    SESSIONS,
    _drive,
    _sqlite_connect,
    _sqlite_reserver,
    q3_store,
    raw_asyncpg,
)
from turnqueue.settings import Settings
from turnqueue.store.sql import open_store

WARM, MEASURED = 10, 50


async def main(mode: str, toggle: ctypes.CDLL) -> None:
    pg = mode.startswith("pg")
    admin = os.environ["TURNQUEUE_TEST_DATABASE_URL"] if pg else None
    mode = mode.removeprefix("pg")
    with tempfile.TemporaryDirectory() as tmp:
        backend = Backend("postgresql" if pg else "sqlite", admin, Path(tmp))
        async with backend.database() as url:
            work = await seed_sessions(url, SESSIONS, entries=WARM + MEASURED)
            if mode == "store":
                store = await open_store(Settings(database_url=url))
                try:
                    await _drive(work, WARM, lambda s: q3_store(store, s))
                    toggle.cg_start()
                    await _drive(work, MEASURED, lambda s: q3_store(store, s))
                    toggle.cg_stop()
                finally:
                    await store.close()
            elif mode == "raw" and pg:
                # raw_asyncpg opens and closes its pool inside: that part is measured alone
                # (dump "pool") and subtracted from the reservations' (dump "measured").
                await raw_asyncpg(url, work, WARM)
                toggle.cg_start()
                toggle.cg_zero()
                await raw_asyncpg(url, work, 0)
                toggle.cg_dump(b"pool")
                await raw_asyncpg(url, work, MEASURED)
                toggle.cg_dump(b"measured")
                toggle.cg_stop()
            elif mode == "raw":
                conn = _sqlite_connect(Path(url.removeprefix("sqlite:///")))
                one = _sqlite_reserver(conn)
                for _ in range(WARM):
                    for sid in work:
                        assert one(sid)
                toggle.cg_start()
                for _ in range(MEASURED):
                    for sid in work:
                        if not one(sid):
                            raise RuntimeError("ran out of entries")
                toggle.cg_stop()
                conn.close()
            else:
                toggle.cg_start()
                toggle.cg_stop()
    print(f"{mode}: {SESSIONS * MEASURED} reservations")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], ctypes.CDLL(sys.argv[2])))
