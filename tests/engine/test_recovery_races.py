"""Two instances recovering the same dead instance's session at once (M6, R2, C2, C5).

Found by the long cluster-model run when the cancellation projection lived in each process's
memory: two recoverers could publish a dead owner's cleared cancellation out of order. Now the
projection is rows (the CANCELLING holds and the lock row's cancellation revision): each
recovery runs under the session's lock row, so the second finds nothing left to clear.
"""

from __future__ import annotations

import asyncio
from typing import Any

from engine_helpers import PRINCIPAL, ManualAgent, new_session
from engine_probes import add_hold
from test_cancellation_rules import _pg_only, crash

from turnqueue.bus import EventKind
from turnqueue.domain import HoldReason
from turnqueue.engine.recovery import recover
from turnqueue.timeouts import within


async def test_r2_c5_m6_two_instances_recovering_one_session_clear_its_cancellation_once(
    database_url: str, engine_settings: Any, open_engine: Any
) -> None:
    """M6, C5, C2, R2: X dies with a cancellation of its turn pending; A and B recover it at
    the same time. The cancellation clears once, with one revision above X's, and both
    instances answer the same status (and so does a restarted reader)."""
    _pg_only(database_url)
    slow = engine_settings.model_copy(update={"lease_seconds": 120})  # no heartbeat recovery
    a = await open_engine(slow)
    b = await open_engine(slow, agent_=ManualAgent())
    agent_x = ManualAgent()
    x = await open_engine(slow, agent_=agent_x)
    _, session = await new_session(x)
    sid = session.id
    await x.send_message(PRINCIPAL, sid, "work")
    await agent_x.next_run()
    await add_hold(x, sid, HoldReason.CANCELLING)  # a cancel of X's under way
    pending = await x.cancellation(sid)
    assert pending.pending is True
    await crash(x)
    cleared: list[Any] = []
    with a.bus.subscribe(sid, [EventKind.CANCELLATION]) as on_a:
        live = {a.core.instance, b.core.instance}
        await asyncio.gather(
            recover(a.core, a.turns, sweep=False, live=live),
            recover(b.core, b.turns, sweep=False, live=live),
        )
        while len(cleared) < 1:
            event = await within(on_a.get(), 10)
            # X's own pending=True event (its revision) may reach A late, through NOTIFY,
            # after A subscribed: an older revision, which a client drops (R1).
            if event.cancellation is not None and event.cancellation.revision > pending.revision:
                cleared.append(event.cancellation)
    status = await a.cancellation(sid)
    assert status == await b.cancellation(sid)
    assert status.pending is False and status.revision == pending.revision + 1
    assert [c.pending for c in cleared] == [False]
    for run in agent_x.runs:
        run.fail("process died")
