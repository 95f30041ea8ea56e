"""P9's zero-time-turn pair, alone: CPU per turn with the log or in memory (tree on PYTHONPATH)."""
import asyncio, json, os, sys, time, tempfile, cProfile, pstats
from pathlib import Path
from bench.common import Backend
from bench.p2_turns import ZeroAgent, SESSIONS
from bench.p9_output_log import in_memory, _with_engine, _rate_and_cpu
from turnqueue.engine import outputlog

backend_name, mode, per_session, reps = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
prof = os.environ.get("PROF")
stats = {"writes": 0, "records": 0}
orig = outputlog.Flusher._write
async def counted(self, batches):
    stats["writes"] += 1; stats["records"] += len(batches)
    await orig(self, batches)
outputlog.Flusher._write = counted
import asyncpg
trips = {"n": 0}
for name in ("execute", "fetch", "fetchrow", "fetchval", "executemany"):
    def wrap(orig):
        async def counted(self, *a, **k):
            trips["n"] += 1
            return await orig(self, *a, **k)
        return counted
    setattr(asyncpg.Connection, name, wrap(getattr(asyncpg.Connection, name)))

async def main():
    admin = os.environ.get("TURNQUEUE_TEST_DATABASE_URL") if backend_name == "postgresql" else None
    backend = Backend(backend_name, admin, Path(tempfile.mkdtemp()))
    out = []
    with in_memory(mode == "memory"):
        async with backend.database() as url:
            await _with_engine(url, ZeroAgent(), lambda e: _rate_and_cpu(e, 1))
        for _ in range(reps):
            async with backend.database() as url:
                async def work(e):
                    # warm this engine first: one turn per session, then the measured turns
                    await _rate_and_cpu(e, 1)
                    stats["writes"] = stats["records"] = 0
                    trips["n"] = 0
                    p = cProfile.Profile() if prof else None
                    if p: p.enable()
                    import resource
                    r0 = resource.getrusage(resource.RUSAGE_SELF)
                    c = time.process_time(); w = time.perf_counter()
                    from bench.p2_turns import _turnqueue_rate
                    rate = await _turnqueue_rate(e, per_session)
                    c = time.process_time() - c
                    r1 = resource.getrusage(resource.RUSAGE_SELF)
                    n = SESSIONS * per_session
                    stats.setdefault("user", []).append((r1.ru_utime - r0.ru_utime) / n * 1e6)
                    stats.setdefault("sys", []).append((r1.ru_stime - r0.ru_stime) / n * 1e6)
                    if p:
                        p.disable(); p.dump_stats(prof)
                    return rate, c / (SESSIONS * per_session) * 1e6, trips["n"] / (SESSIONS * per_session)
                out.append(await _with_engine(url, ZeroAgent(), work))
    print(json.dumps({"mode": mode, "runs": out, **stats}))
asyncio.run(main())
