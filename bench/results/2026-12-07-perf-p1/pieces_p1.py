"""Instructions of the parts of a reservation, each called N times under callgrind.

From a tree, with that tree first on ``PYTHONPATH``::

    valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file=OUT \
        python pieces_p1.py TOGGLE_SO

One dump per part (``CALLGRIND_DUMP_STATS_AT(name)``, after ``CALLGRIND_ZERO_STATS``): its
``totals`` / N is the part's instructions per call, ``nothing`` the loop's own. The
``args_*`` parts bind one datetime object again and again, so on a tree that keeps the last
datetime's text they read the cached case.
"""
from __future__ import annotations

import asyncio
import ctypes
import sys
import tempfile
from pathlib import Path

from bench.common import Backend, seed_sessions
from turnqueue.domain import MessageSource, Turn, TurnStatus, new_id, utcnow, Session, SessionState, QueuePolicy, QueueEntry
from turnqueue.settings import Settings
from turnqueue.store.sql import open_store
from turnqueue.store import rows as rowsmod, entries as entmod, tx as txmod, queuestate as qsmod
from turnqueue.store.conn import Buffered
from turnqueue.store.protocol import SessionView

N = 2000


async def main(cg: ctypes.CDLL) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        async with Backend("sqlite", None, Path(tmp)).database() as url:
            work = await seed_sessions(url, 8, entries=20)
            store = await open_store(Settings(database_url=url))
            sid = work[0]
            async with store.transaction() as tx:
                dialect = tx._conn._dialect
                conn = tx._conn._conn
                view_plan = rowsmod.VIEW.plan(dialect)
                view_params = {"p_session_id": sid}
                raw_view = conn.execute(view_plan.sql, view_plan.args(view_params)).fetchall()
                view_row = view_plan.rows(raw_view)[0]
                res_plan = entmod._RESERVE_HEAD.plan(dialect)
                now = utcnow()
                res_params = {"p_session_id": sid, "p_now": now, "p_owner": 1}
                raw_res = conn.execute(res_plan.sql, res_plan.args(res_params)).fetchall()
                res_row = res_plan.rows(raw_res)[0]
                turn_params = {"p_turn_id": new_id(), "p_session_id": sid, "p_prompt": "x",
                    "p_source": "USER", "p_now": now, "p_owner": 1, "p_state": "RUNNING",
                    "p_key": None, "p_entry_id": None}
                plans = {
                    "args_view": (view_plan, view_params),
                    "args_reserve": (res_plan, res_params),
                    "args_bump_session": (txmod.BUMP_SESSION_STATE.plan(dialect), turn_params),
                    "args_insert_turn": (txmod._INSERT_TURN.plan(dialect), turn_params),
                    "args_consume": (txmod._CONSUME_ONE.plan(dialect), {"p_id": "x"}),
                    "args_bump_queue": (qsmod._BUMP_QUEUE.plan(dialect), view_params),
                }
                for name, (plan, _) in plans.items():
                    print(name, plan.sql.replace("\n", " "), dict(plan.bound), file=sys.stderr)
            await store.close()

    def run(name, fn):
        cg.cg_zero()
        for _ in range(N):
            fn()
        cg.cg_dump(name.encode())

    cg.cg_start()
    run("nothing", lambda: None)
    run("view_from", lambda: rowsmod.view_from(view_row))
    run("entry_from", lambda: entmod.entry_from(res_row, position=1))
    run("rows_view", lambda: view_plan.rows(raw_view))
    run("rows_reserve", lambda: res_plan.rows(raw_res))
    for name, (plan, params) in plans.items():
        run(name, lambda plan=plan, params=params: plan.args(params))
    run("new_id", new_id)
    run("utcnow", utcnow)
    run("Session9", lambda: Session("a", "b", "c", "d", SessionState.RUNNING, 1, now, now))
    run("QueuePolicy4", lambda: QueuePolicy("a", True, None, 1))
    run("QueueEntry7", lambda: QueueEntry("a", "b", 1, "c", MessageSource.USER, now, None))
    run("Turn14kw", lambda: Turn("a", "b", "c", MessageSource.USER, TurnStatus.RUNNING, "", None, now, None, 1, client_message_id=None, entry_id=None))
    run("Turn14pos", lambda: Turn("a", "b", "c", MessageSource.USER, TurnStatus.RUNNING, "", None, now, None, 1, None, None, None, None))
    run("Buffered", lambda: Buffered([], 0))
    em = entmod.entry_from
    run("em_of_row", lambda: em._of_row(res_row))
    vals = em._of_row(res_row)
    run("em_build", lambda: em._build(vals, {"position": 1}))
    run("em_build_noenum", lambda: QueueEntry(*list(vals)[:2], 1, *list(vals)[2:]))
    run("em_call_kw", lambda: QueueEntry(*vals[:2], position=1, content=vals[2], source=MessageSource.USER, queued_at=now, client_message_id=None))
    run("session_from_view", lambda: rowsmod._SESSION(view_row))
    run("SessionView11", lambda: SessionView(1, 2, None, 3, None, None, None, False, 0, False, False))
    run("tuple14", lambda: ("a", "b", "c", MessageSource.USER, TurnStatus.RUNNING, "", None, now, None, 1, None, None, None, None))
    cg.cg_stop()


asyncio.run(main(ctypes.CDLL(sys.argv[1])))
