"""Recovery at start-up (M6): what a dead process left behind is put right before serving.

- every RUNNING turn ends FAILED (error ``interrupted``) and its session waits for input;
- a session left RUNNING or STARTING with no running turn waits for input too;
- in-flight entries return to the head of their queues with their ids (Q10);
- then one automatic drain (Q3) per recovered session decides what runs next.

The cancellation projection needs nothing: this process has a new epoch (R2), so its first answer
for any session, ``pending: false`` at ``epoch << 32``, outranks whatever was said before.
"""

from __future__ import annotations

import logging

from turnqueue.bus import EventKind
from turnqueue.domain import SessionState, TurnStatus
from turnqueue.engine.core import Core
from turnqueue.engine.turns import Turns

log = logging.getLogger(__name__)


async def recover(core: Core, turns: Turns) -> set[str]:
    recovered: set[str] = set()
    async with core.store.transaction() as tx:
        for turn in await tx.running_turns():
            await tx.end_turn(
                turn.id,
                status=TurnStatus.FAILED,
                output=turn.output,
                error="interrupted",
                session_state=SessionState.WAITING_FOR_INPUT,
            )
            recovered.add(turn.session_id)
        for session_id in await tx.in_flight_sessions():
            await tx.lock(session_id)
            await tx.release_entries(session_id, None)
            recovered.add(session_id)
        for session_id in recovered:
            revision = await tx.bump_queue_revision(session_id)
            core.publish_after(tx, EventKind.QUEUE, session_id, revision)
            core.publish_after(tx, EventKind.SESSION, session_id, 0)
    for session_id in sorted(recovered):
        log.info("recovered session %s", session_id)
        async with core.session_lock(session_id):
            await turns.auto_drain(session_id)
    return recovered
