"""Cancelling the active turn: explicit cancels (C3–C5, C9, Q7, W2); the stop ladder itself is
the runner's (``TurnRunner.stop``).

An accepted cancellation is a task owned by the engine, not by the request that asked for it (C4):
the caller awaits it through ``asyncio.shield`` and may go away. Concurrent explicit cancels of one
session join the same task (C3). The reference that makes ``cancellationPending`` true is held by a
context manager for the whole operation, so every exit releases it (C5).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from typing import Any

from turnqueue.domain import (
    CancelKind,
    CancelOutcome,
    HoldReason,
    PauseReason,
    SessionState,
    TurnStatus,
)
from turnqueue.engine.core import Core
from turnqueue.engine.peers import OwnerGone, OwnerUnreachable
from turnqueue.engine.runner import StopLadder, TurnRunner
from turnqueue.engine.turns import Turns
from turnqueue.errors import Conflict, ErrorCode

log = logging.getLogger(__name__)


class Cancels:
    def __init__(
        self,
        core: Core,
        turns: Turns,
        *,
        moves_on_cancel: Callable[[str], Awaitable[bool]] | None = None,
        on_cancelled: Callable[[str], Awaitable[None]] | None = None,
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
        owner = await self.core.remote_owner(session_id)
        if owner is not None:
            forwarded = await self._forward(owner, session_id)
            if forwarded is not None:
                return forwarded
        op = self._explicit.get(session_id)
        if op is None:
            op = self.core.spawn(self._explicit_op(session_id), name=f"cancel:{session_id}")
            self._explicit[session_id] = op
            op.add_done_callback(lambda _: self._explicit.pop(session_id, None))
        return await asyncio.shield(op)

    async def _forward(self, owner: int, session_id: str) -> CancelOutcome | None:
        """C7/M4: only the owner can stop its agent; it joins concurrent cancels itself (C3).
        None when the owner died before taking the request: its agent is gone with it, and
        the cancel runs here (C5)."""
        assert self.core.cluster is not None
        timeout = self.core.settings.cancel_operation_timeout + 5
        try:
            reply = await self.core.cluster.call(owner, "cancel", {"s": session_id}, timeout)
        except OwnerGone:
            log.warning("owner %s of session %s is gone; the cancel runs here", owner, session_id)
            return None
        except OwnerUnreachable:
            log.warning("owner %s of session %s did not answer a cancel", owner, session_id)
            return CancelOutcome.TIMED_OUT
        return CancelOutcome(reply["outcome"])

    async def serve_forwarded(self, args: dict[str, Any]) -> dict[str, Any]:
        return {"outcome": (await self.cancel(str(args["s"]))).value}

    async def _explicit_op(self, session_id: str) -> CancelOutcome:
        started = time.monotonic()
        outcome = await self._explicit_stop(session_id)
        self.core.metrics.cancel_done(outcome.value, time.monotonic() - started)
        return outcome

    async def _explicit_stop(self, session_id: str) -> CancelOutcome:
        moving = False
        # The explicit reference (CANCELLING, C5) is released on every exit of this block, and
        # the queue revision bumped when it starts and ends (``Core.hold``).
        async with AsyncExitStack() as stack:
            async with self.core.session_lock(session_id):
                runner = self.core.runners.get(session_id)
                if runner is not None and not runner.ending:
                    await self._mark_accepted(session_id, runner.turn.id)  # Q7, durable first
                    await stack.enter_async_context(self.core.hold(session_id, CancelKind.EXPLICIT))
                elif runner is not None or not await self._end_agent_gone(session_id, stack):
                    return await self._nothing_running(session_id)
            outcome = CancelOutcome.STOPPED  # a turn whose agent was gone ended above
            if runner is not None:
                outcome = await self.stop(runner)
            cancelled = runner is None or runner.final_status is TurnStatus.CANCELLED
            await self._park_backlog(session_id)  # Q7: before the reference is released
            # W2: a step change the cancel triggers holds the queue from before the reference
            # is released until it has committed, so no prompt that arrives meanwhile (another
            # client's enqueueMessage) starts on the step being left. The hold is handed to the
            # step change (``on_cancelled`` releases it), so it is no ``Core.hold`` block.
            if cancelled and self.moves_on_cancel is not None:
                moving = await self.moves_on_cancel(session_id)
                if moving:
                    await self.core.add_hold(session_id, HoldReason.WORKFLOW_TRANSITION)
        if moving and self.on_cancelled is not None:
            await self.on_cancelled(session_id)  # W2: the move, then one drain (W1)
            return outcome
        async with self.core.session_lock(session_id):
            await self.turns.auto_drain(session_id)  # obeys the policy Q7 may just have set
        return outcome

    async def _end_agent_gone(self, session_id: str, stack: AsyncExitStack) -> bool:
        """C5: a RUNNING turn whose agent is gone (no runner here, no live owner elsewhere)
        ends here as a cancelled one, under an explicit reference that ``stack`` releases after
        the Q7 park, like every other explicit cancel. False when there is no such turn.
        Called under the session lock, with no runner for the session."""
        async with self.core.store.read() as tx:
            view = await tx.view(session_id)
        if view is None or view.running_turn_id is None:
            return False
        await stack.enter_async_context(self.core.hold(session_id, CancelKind.EXPLICIT))
        async with self.core.change(session_id, session_lock=False) as c:  # the caller holds it
            turn_id = c.view.running_turn_id
            if turn_id is not None:  # else recovery ended it meanwhile
                await c.end_turn(
                    turn_id,
                    status=TurnStatus.CANCELLED,
                    output=await c.tx.output_text(turn_id),  # its log (O1)
                    error="agent gone",
                    session_state=SessionState.WAITING_FOR_INPUT,
                )
                await c.queue_changed()
        return True

    async def _nothing_running(self, session_id: str) -> CancelOutcome:
        """C9: no reference, no transition, auto-run untouched; withdraw a clarification.

        Called under the session lock. A withdrawn clarification no longer holds the queue,
        so an automatic drain follows (Q9: ON means run when eligible)."""
        async with self.core.change(session_id, session_lock=False) as c:  # the caller holds it
            withdrawn = await c.clear_clarification() is not None
            if withdrawn:
                await c.queue_changed()
        if withdrawn:
            await self.turns.auto_drain(session_id)
        return CancelOutcome.NOTHING_RUNNING

    async def _mark_accepted(self, session_id: str, turn_id: str) -> None:
        """Q7: record the explicit cancel of ``turn_id`` durably before it is accepted, so that
        recovery parks the backlog if this instance dies before ``_park_backlog`` (which clears
        the mark in the transaction that parks). If it cannot be written, the cancel fails
        with the store's error and nothing was accepted. Called under the session lock."""
        async with self.core.change(session_id, session_lock=False) as c:  # the caller holds it
            await c.tx.set_cancel_mark(session_id, turn_id)

    async def _park_backlog(self, session_id: str) -> None:
        """Q7: park what is queued. Under no session lock: it decides nothing about a turn
        (the policy it writes is read under the lock row by every start)."""
        async with self.core.change(session_id, session_lock=False) as c:
            if c.view.cancel_mark is not None:
                await c.tx.set_cancel_mark(session_id, None)  # decided here, atomically
            if c.view.queued == 0:
                return
            await c.tx.set_policy(session_id, auto_run=False, pause_reason=PauseReason.CANCEL)
            await c.queue_changed()

    async def stop(self, runner: TurnRunner) -> CancelOutcome:
        """Stop ``runner``'s agent with the ladder the settings give (``TurnRunner.stop``)."""
        settings = self.core.settings
        ladder = StopLadder(
            settings.cancel_timeout,
            settings.escalation_timeout,
            settings.cancel_operation_timeout,
        )
        return await runner.stop(ladder)
