"""A turn's end transaction alone (lock row, [the log's last record], end_turn), three ways,
interleaved in one process on one database: 'none' (the in-memory path: no record), 'checked'
(the record appended as before this change: append_output with its RUNNING check), 'unchecked'
(as the end now appends: running=True). Per end: wall µs, process CPU µs (medians of rounds)."""
import asyncio, os, sys, tempfile, time, statistics as st
from pathlib import Path
from bench.common import Backend
from turnqueue.domain import ItemKind, MessageSource, OutputRecord, SessionState, TurnStatus
from turnqueue.settings import Settings
from turnqueue.store.sql import open_store

backend_name, rounds, per = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
MODES = ("none", "checked", "unchecked") if len(sys.argv) < 5 else (sys.argv[4],)
CG = len(sys.argv) > 5  # under callgrind: instrument the measured end transactions only
import subprocess
def cg(on):
    if CG:
        subprocess.run(["callgrind_control", "-i", "on" if on else "off", str(os.getpid())], check=True, capture_output=True)

async def new_session(store):
    async with store.transaction() as tx:
        task = await tx.create_task(title="t", owner="alice", workflow_step="IN_PROGRESS")
        session = await tx.create_session(task_id=task.id, agent="scripted", state=SessionState.WAITING_FOR_INPUT)
    return session.id

async def main():
    admin = os.environ.get("TURNQUEUE_TEST_DATABASE_URL") if backend_name == "postgresql" else None
    backend = Backend(backend_name, admin, Path(tempfile.mkdtemp()))
    async with backend.database() as url:
        store = await open_store(Settings(database_url=url))
        sids = {m: await new_session(store) for m in MODES}
        res = {m: ([], []) for m in MODES}
        for r in range(rounds + 1):
            for mode in (MODES if r % 2 else MODES[::-1]):
                sid = sids[mode]
                walls = cpus = 0.0
                for _ in range(per):
                    async with store.transaction() as tx:
                        await tx.lock(sid)
                        tid = (await tx.start_turn(sid, prompt="p", source=MessageSource.USER)).id
                    rec = [OutputRecord(tid, 0, 0, ItemKind.MESSAGE, "ok")]
                    if r: cg(True)
                    w, c = time.perf_counter(), time.process_time()
                    async with store.transaction() as tx:
                        await tx.lock(sid)
                        if mode == "checked":
                            await tx.append_output({tid: rec})
                        elif mode == "unchecked":
                            await tx.append_output({tid: rec}, running=True)
                        await tx.end_turn(tid, status=TurnStatus.COMPLETED, output="ok", error=None,
                                          session_state=SessionState.WAITING_FOR_INPUT)
                    if r: cg(False)
                    walls += time.perf_counter() - w
                    cpus += time.process_time() - c
                if r:  # round 0 warms up
                    res[mode][0].append(walls / per * 1e6)
                    res[mode][1].append(cpus / per * 1e6)
        await store.close()
    for m, (w, c) in res.items():
        print(f"{backend_name} {m:9s} wall {st.median(w):6.0f} µs  CPU {st.median(c):5.0f} µs per end "
              f"(medians of {len(w)} rounds of {per}; wall range {min(w):.0f}–{max(w):.0f})")
asyncio.run(main())
