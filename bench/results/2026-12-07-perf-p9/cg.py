"""Callgrind driver: one engine, warm-up turns, then N turns per session (zero-time agent).
The flush interval is set long: under valgrind's slowdown a 5 ms timer would catch turns that
natively end before it fires (the native runs show no flusher write in this workload)."""
import asyncio, os, sys, tempfile
from pathlib import Path
from bench.common import Backend
from bench.p2_turns import ZeroAgent, _turnqueue_rate
from bench.p9_output_log import in_memory, _with_engine
from turnqueue.engine import outputlog
outputlog.FLUSH_SECONDS = 30.0
stats = {"writes": 0}
_orig = outputlog.Flusher._write
async def _counted(self, batches):
    stats["writes"] += 1
    await _orig(self, batches)
outputlog.Flusher._write = _counted
backend_name, mode, per_session = sys.argv[1], sys.argv[2], int(sys.argv[3])
async def main():
    admin = os.environ.get("TURNQUEUE_TEST_DATABASE_URL") if backend_name == "postgresql" else None
    backend = Backend(backend_name, admin, Path(tempfile.mkdtemp()))
    with in_memory(mode == "memory"):
        async with backend.database() as url:
            async def work(e):
                import subprocess
                await _turnqueue_rate(e, 1)
                await _turnqueue_rate(e, 1)
                subprocess.run(["callgrind_control", "-i", "on", str(os.getpid())], check=True, capture_output=True)
                await _turnqueue_rate(e, per_session)
                subprocess.run(["callgrind_control", "-i", "off", str(os.getpid())], check=True, capture_output=True)
                print("flusher writes", stats, file=sys.stderr)
            await _with_engine(url, ZeroAgent(), work)
asyncio.run(main())
