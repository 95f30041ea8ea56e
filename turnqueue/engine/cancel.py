"""Cancelling the active turn: explicit cancels (C3–C5, C9, Q7, W2); the stop ladder itself is
the runner's (``TurnRunner.stop``).

An accepted cancellation is a task owned by the engine, not by the request that asked for it (C4):
the caller awaits it through ``asyncio.shield`` and may go away. Concurrent explicit cancels of one
session join the same task (C3). The reference that makes ``cancellationPending`` true is taken with
the cancel's acceptance and released with its finish, or on its own on any other exit (C5).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from turnqueue.domain import CancelOutcome, HoldReason, PauseReason, TurnStatus
from turnqueue.engine.cluster import OwnerUnreachable
from turnqueue.engine.core import Core
from turnqueue.engine.runner import StopLadder, TurnRunner
from turnqueue.engine.turns import Turns
from turnqueue.engine.unit_of_work import Reference
from turnqueue.errors import Conflict, ErrorCode

log = logging.getLogger(__name__)


class Cancels:
    def __init__(
        self,
        core: Core,
        turns: Turns,
        *,
        moves_on_cancel: Callable[[str], Awaitable[bool]],
        on_cancelled: Callable[[str], Awaitable[None]],
    ) -> None:
        self.core = core
        self.turns = turns
        self._explicit: dict[str, asyncio.Task[CancelOutcome]] = {}
        #: sessions with a Send Now replacement under way (C3: an explicit cancel does not join it)
        self.replacements: set[str] = set()
        #: W2: does a user's cancel move the task on (read before the cancellation's reference
        #: is released), and the move itself (run after, under no lock)
        self.moves_on_cancel = moves_on_cancel
        self.on_cancelled = on_cancelled

    def busy(self, session_id: str) -> bool:
        return session_id in self._explicit or session_id in self.replacements

    async def cancel(self, session_id: str) -> CancelOutcome:
        """A user's cancel. Joins one already under way (C3)."""
        if session_id in self.replacements:
            raise Conflict(
                ErrorCode.SEND_NOW_CONFLICT, "a Send Now is replacing the active turn right now"
            )
        # C7/M4: only the owner can stop its agent; it joins concurrent cancels itself (C3).
        timeout = self.core.settings.cancel_operation_timeout + 5
        try:
            reply = await self.core.ask_owner(session_id, "cancel", {"s": session_id}, timeout)
        except OwnerUnreachable:
            log.warning("the owner of session %s did not answer a cancel", session_id)
            return CancelOutcome.TIMED_OUT
        if reply is not None:
            return CancelOutcome(reply["outcome"])
        op = self._explicit.get(session_id)
        if op is None:
            op = self.core.spawn(self._explicit_op(session_id), name=f"cancel:{session_id}")
            self._explicit[session_id] = op
            op.add_done_callback(lambda _: self._explicit.pop(session_id, None))
        return await asyncio.shield(op)

    async def serve_forwarded(self, args: dict[str, Any]) -> dict[str, Any]:
        return {"outcome": (await self.cancel(str(args["s"]))).value}

    async def _explicit_op(self, session_id: str) -> CancelOutcome:
        started = time.monotonic()
        outcome = await self._explicit_stop(session_id)
        self.core.metrics.cancel_done(outcome.value, time.monotonic() - started)
        return outcome

    async def _explicit_stop(self, session_id: str) -> CancelOutcome:
        """Three transactions: the acceptance (the durable cancel mark, Q7: recovery parks the
        backlog if this instance dies before the finish clears it; and the explicit reference,
        C1: the session is cancellation-pending from its commit on; if it cannot be written,
        nothing was accepted); the stopped turn's end; the finish (:meth:`_finish`). The
        reference is released on every exit: by the finish, or on its own when the stop or
        the finish fails (``Core.reference``, C5)."""
        moving = False
        async with self.core.reference(session_id, HoldReason.CANCELLING) as reference:
            async with self.core.session_lock(session_id):
                runner = self.core.runners.get(session_id)
                if runner is not None and not runner.ending:
                    async with self.core.change(session_id, session_lock=False) as c:  # held
                        await c.tx.set_cancel_mark(session_id, runner.turn.id)
                        await reference.take_in(c)
                elif runner is not None or not await self._end_agent_gone(session_id, reference):
                    return await self._nothing_running(session_id)
            outcome = CancelOutcome.STOPPED  # a turn whose agent was gone ended above
            if runner is not None:
                outcome = await self.stop(runner)
            if runner is None or runner.final_status is TurnStatus.CANCELLED:
                moving = await self.moves_on_cancel(session_id)
            await self._finish(session_id, moving, reference)
        if moving:
            await self.on_cancelled(session_id)  # W2: the move, then one drain (W1)
        return outcome

    async def _end_agent_gone(self, session_id: str, reference: Reference) -> bool:
        """C5: a RUNNING turn whose agent is gone (no runner here, no live owner elsewhere)
        ends here as a cancelled one, under an explicit reference taken in the same
        transaction and released by the finish, like every other explicit cancel. False when
        there is no such turn. Called under the session lock, with no runner for the session."""
        async with self.core.store.read() as tx:
            view = await tx.view(session_id)
        if view is None or view.running_turn_id is None:
            return False
        async with self.core.change(session_id, session_lock=False) as c:  # the caller holds it
            await reference.take_in(c)
            turn_id = c.view.running_turn_id
            if turn_id is not None:  # else recovery ended it meanwhile
                await c.tx.end_turn(
                    turn_id,
                    status=TurnStatus.CANCELLED,
                    output=await c.tx.output_text(turn_id),  # its log (O1)
                    error="agent gone",
                )
        return True

    async def _nothing_running(self, session_id: str) -> CancelOutcome:
        """C9: no reference, no transition, auto-run untouched; withdraw a clarification.

        Called under the session lock. A withdrawn clarification no longer holds the queue,
        so an automatic drain follows (Q9: ON means run when eligible)."""
        async with self.core.change(session_id, session_lock=False) as c:  # the caller holds it
            withdrawn = await c.tx.clear_clarification(session_id) is not None
        if withdrawn:
            await self.turns.reserve(session_id)
        return CancelOutcome.NOTHING_RUNNING

    async def _finish(self, session_id: str, moving: bool, reference: Reference) -> None:
        """The end of an explicit cancel, in one transaction: Q7 parks what is queued (and
        clears the mark, decided here), W2 hands the step change its WORKFLOW_TRANSITION hold
        when the cancel moves the task (released by ``on_cancelled``), and the explicit
        reference ends (C1, C5). Parking and releasing in one commit leaves no moment in which
        the reference is gone and the backlog not parked, so no automatic drain follows. It
        decides nothing about a turn, so it takes no session lock (every start reads the policy
        under the lock row, Q3)."""
        async with self.core.change(session_id, session_lock=False) as c:
            if c.view.cancel_mark is not None:
                await c.tx.set_cancel_mark(session_id, None)
            if c.view.queued:
                await c.tx.set_policy(session_id, auto_run=False, pause_reason=PauseReason.CANCEL)
            if moving:
                await c.change_hold(HoldReason.WORKFLOW_TRANSITION, 1)
            await reference.end_in(c)

    async def stop(self, runner: TurnRunner) -> CancelOutcome:
        """Stop ``runner``'s agent with the ladder the settings give (``TurnRunner.stop``)."""
        s = self.core.settings
        ladder = StopLadder(s.cancel_timeout, s.escalation_timeout, s.cancel_operation_timeout)
        return await runner.stop(ladder)
