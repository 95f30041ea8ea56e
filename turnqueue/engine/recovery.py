"""Recovery (M6): what a dead process left behind is put right, at start-up and (PostgreSQL)
whenever another instance's lease expires. *Orphans* are work owned by no live instance (on
SQLite, by no instance but this one):

- every agent process group a dead instance recorded on this host (``agent_processes``: a
  ``command`` turn's, an ``acp`` session's, running a turn or idle) is killed;
- every orphaned RUNNING turn ends FAILED (error ``interrupted``); its session waits for input;
- a session left RUNNING or STARTING with no running turn waits for input too;
- orphaned in-flight entries return to the head of their queues with their ids (Q10);
- an accepted explicit cancel whose owner died before it parked the backlog (its durable mark,
  ``cancel_mark``) parks it now, in the same transaction (Q7): the drain below is then paused;
- the holds (``session_holds``) of instances that are not live are deleted (Q9): a cancel or a
  step change that died with its instance holds no queue, and a cancellation it left pending
  clears with a revision of its own (C5, C2);
- every approval still PENDING of a turn it ends is settled CANCELLED, by ``system`` (A6, A10);
- then one automatic drain (Q3) per recovered session decides what runs next.

Each session is recovered in its own transaction under its lock row, in id order, so two
instances adopting the same orphans cannot deadlock; every step is idempotent.
"""

from __future__ import annotations

import logging
import os
import signal
import socket

from turnqueue.domain import PauseReason, SessionState, TurnStatus, utcnow
from turnqueue.engine.core import Core
from turnqueue.engine.turns import Turns

log = logging.getLogger(__name__)


async def recover(
    core: Core,
    turns: Turns,
    *,
    sweep: bool,
    live: set[int] | None = None,
) -> None:
    """Recover the orphans; with ``sweep`` also drain every queue left eligible (a graceful
    shutdown stops turns without draining, and a crash can fall between a turn's end and its
    drain, Q4): ON means "run when eligible" (Q9) after a restart too."""
    if live is None:
        live = await core.cluster.live() if core.cluster is not None else set()
    live = live | {core.instance}
    host = socket.gethostname()
    # At start-up on a single-process store nothing else can be mid-way: no grace period.
    grace = core.settings.lease_seconds if core.cluster is not None else 0.0
    async with core.store.read() as tx:
        orphans = await tx.orphans(live, host=host, grace=grace)
        eligible = set(await tx.eligible_sessions()) if sweep else set()
    await _kill_orphaned_processes(core, host, orphans.processes)
    o = orphans
    recovered = sorted({*o.turns, *o.entries, *o.stuck, *o.cancel_marks, *o.holds})
    for session_id in recovered:
        await _recover_session(
            core,
            session_id,
            o.turns.get(session_id, []),
            o.entries.get(session_id, []),
            o.cancel_marks.get(session_id),
            live,
        )
        log.warning("recovered session %s", session_id)
    for session_id in sorted(eligible | set(recovered)):  # Q3: what runs next
        async with core.session_lock(session_id):
            await turns.reserve(session_id)


async def _kill_orphaned_processes(core: Core, host: str, orphans: list[int]) -> None:
    """Hazard: a process group is killed only on the host that ran it, and only soon after the
    death, since its id can be reused once the group is gone (recovery runs at start-up or
    within one lease)."""
    for pgid in orphans:
        try:
            os.killpg(pgid, signal.SIGKILL)
            log.warning("killed the agent process group %d a dead server left", pgid)
        except (ProcessLookupError, PermissionError):
            pass
        async with core.store.transaction() as tx:
            await tx.forget_process(host, pgid)


async def _recover_session(
    core: Core,
    session_id: str,
    turn_ids: list[str],
    entry_ids: list[str],
    mark: str | None,
    live: set[int],
) -> None:
    # Under no session lock: what recovery adopts has no runner here (a dead
    # instance's work, or this process's before its start), and the lock row orders it.
    async with core.change(session_id, session_lock=False) as c:
        tx, view = c.tx, c.view
        if mark is not None and view.cancel_mark == mark:  # still undecided under the lock
            await tx.set_cancel_mark(session_id, None)
            if view.queued + len(entry_ids) > 0:
                await tx.set_policy(session_id, auto_run=False, pause_reason=PauseReason.CANCEL)
        for turn_id in turn_ids:
            await tx.end_turn(
                turn_id,
                status=TurnStatus.FAILED,
                output=await tx.output_text(turn_id),  # what its log kept (O1)
                error="interrupted",
            )
            await tx.settle_approvals(turn_id, answered_by="system", at=utcnow())
        await c.drop_orphaned_holds(live)
        if entry_ids:
            await tx.release_entries(session_id, entry_ids)
        if not turn_ids and view.running_turn_id is None and not view.session.promptable:
            if view.session.state in (SessionState.RUNNING, SessionState.STARTING):
                await tx.set_session_state(session_id, SessionState.WAITING_FOR_INPUT)
        await c.queue_changed()
        c.session_changed()  # always: a stream following the session reads it again
