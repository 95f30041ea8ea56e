"""Found by the long cluster-model run (README, Reliability): two instances recovering the same
dead instance's session at once (M6) can publish its cancellation revisions out of order (R2).

``recover`` takes one fresh epoch, then adopted each recovered session with ``(False, epoch <<
32)`` before that session's transaction. An instance B that took a *newer* epoch meanwhile could
adopt and publish first; an instance A that did not hear it (its LISTEN cut) then published a
lower revision for the same session, and every client that saw B's dropped A's from then on.
Fixed: a session is adopted inside its recovery transaction, under the lock row, after reading
the durable floor, and continues above it (``recovery._recover_session``).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from engine_helpers import PRINCIPAL, ManualAgent, new_session
from test_cancellation_rules import _gate, _pg_only, crash

from turnqueue.engine.recovery import recover
from turnqueue.store.postgres import PostgresTx


async def test_r2_m6_two_instances_recovering_one_session_never_publish_backwards(
    database_url: str, engine_settings: Any, open_engine: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """R2/M6: A and B both recover dead X's session; A took its fresh epoch first but adopts
    last, with its LISTEN cut. A's answer for the session must not be below B's."""
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
    _gate(a)[0] = False  # A hears nothing from here on
    fetched, go = asyncio.Event(), asyncio.Event()
    next_epoch = PostgresTx.next_epoch

    async def stalled(self: PostgresTx) -> int:
        epoch = await next_epoch(self)
        task = asyncio.current_task()
        if task is not None and task.get_name() == "recovery of A":
            fetched.set()
            await go.wait()
        return epoch

    monkeypatch.setattr(PostgresTx, "next_epoch", stalled)
    await crash(x)
    live = {a.core.instance, b.core.instance}
    on_a = asyncio.create_task(
        recover(a.core, a.turns, sweep=False, live=live), name="recovery of A"
    )
    await asyncio.wait_for(fetched.wait(), 10)  # A has its epoch, not yet adopted
    # B: a newer epoch, adopted and published
    await recover(b.core, b.turns, sweep=False, live=live)
    go.set()
    await asyncio.wait_for(on_a, 10)
    assert a.cancellation(sid).revision >= b.cancellation(sid).revision
    for run in agent_x.runs:
        run.fail("process died")
