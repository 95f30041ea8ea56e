"""Queue operations: enqueue, manage entries, the auto-run policy, drain, Send Now (Q1–Q14).
A refused mutation raises in its unit of work, before its commit, so it changes nothing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, NamedTuple

from turnqueue.domain import (
    BUSY,
    PROMPTABLE,
    HoldReason,
    MessageSource,
    PauseReason,
    QueueEntry,
    QueuePolicy,
    QueueStatus,
    SendNowScope,
    SendOutcome,
    Turn,
)
from turnqueue.engine.admission import Admission, record, replay
from turnqueue.engine.cancel import Cancels
from turnqueue.engine.cluster import OwnerUnreachable
from turnqueue.engine.core import Core
from turnqueue.engine.turns import DrainResult, Turns
from turnqueue.engine.unit_of_work import Change, Reference, check_capacity
from turnqueue.errors import Conflict, ErrorCode, InvalidInput


class Applied(NamedTuple):
    """A queue mutation's outcome: the turn it started, if any, and the queue status its
    transaction committed (read before COMMIT, ``status=True``)."""

    turn: Turn | None
    queue: QueueStatus


class Enqueued(NamedTuple):
    """An enqueue's outcome: the entry, the turn its automatic drain started (Q3), and the
    queue status its transaction committed."""

    entry: QueueEntry
    turn: Turn | None
    queue: QueueStatus


def _status(c: Change) -> QueueStatus:
    if c.status is None:  # the lock row was read in the transaction: the session exists
        raise RuntimeError(f"session {c.session_id} has no queue status")
    return c.status


@dataclass(frozen=True, slots=True)
class SendNowResult:
    """Send Now's outcome: the turn it started, how many entries it sent, and the queue
    status its last transaction committed (None when another instance ran it: read it)."""

    turn: Turn | None
    sent_count: int
    queue: QueueStatus | None = None


class QueueOps:
    def __init__(self, core: Core, turns: Turns, cancels: Cancels) -> None:
        self.core = core
        self.turns = turns
        self.cancels = cancels

    async def enqueue(
        self,
        session_id: str,
        content: str,
        expected_revision: int | None,
        source: MessageSource = MessageSource.USER,
        client_message_id: str | None = None,
    ) -> Enqueued:
        """Always queue, then one automatic drain (Q3). An enqueue whose ``client_message_id``
        was sent before answers that send's outcome and queues nothing (Q15)."""
        async with self.core.change(session_id, expected_revision, status=True) as c:
            result = None
            replayed = await replay(c, client_message_id, content)
            if replayed is not None:
                if replayed.entry is None:  # a sendMessage of this key started a turn
                    raise Conflict(
                        ErrorCode.IDEMPOTENCY_CONFLICT,
                        f"clientMessageId {client_message_id!r} started a turn: it queued "
                        "nothing to answer with",
                        ["clientMessageId"],
                    )
                entry, turn = replayed.entry, replayed.turn
            else:
                entry, turn, result = await self._add(c, content, source, client_message_id)
        if result is not None:
            self.core.metrics.reservation("automatic", result.value)
        return Enqueued(entry, turn, _status(c))

    async def _add(
        self, c: Change, content: str, source: MessageSource, client_message_id: str | None
    ) -> tuple[QueueEntry, Turn | None, DrainResult]:
        check_capacity(c.view, self.core.settings.queue_limit)
        entry = await c.tx.add_entry(
            c.session_id, content=content, source=source, client_message_id=client_message_id
        )
        # The drain after enqueueMessage (Q3, automatic) runs in this same transaction:
        # one lock row, one commit, one queue revision for "queued and started".
        view = replace(c.view, queued=c.view.queued + 1)
        result, turn = await self.turns.reserve_in(c, view, automatic=True)
        await record(c, client_message_id, content, Admission(turn, entry, SendOutcome.QUEUED))
        return entry, turn, result

    async def update_entry(
        self, session_id: str, entry_id: str, content: str, expected: int | None
    ) -> QueueStatus:
        async with self.core.change(session_id, expected, session_lock=False, status=True) as c:
            entry = _visible(await c.tx.list_entries(session_id), entry_id)
            if entry.source is not MessageSource.USER:
                raise Conflict(
                    ErrorCode.NOT_EDITABLE, f"a {entry.source} entry cannot be edited", ["entryId"]
                )
            await c.tx.update_entry(entry_id, content=content)
        return _status(c)

    async def remove_entry(
        self, session_id: str, entry_id: str, expected: int | None
    ) -> QueueStatus:
        async with self.core.change(session_id, expected, session_lock=False, status=True) as c:
            _visible(await c.tx.list_entries(session_id), entry_id)
            await c.tx.remove_entries(session_id, [entry_id])
        return _status(c)

    async def clear(self, session_id: str, expected: int | None) -> QueueStatus:
        async with self.core.change(session_id, expected, session_lock=False, status=True) as c:
            await c.tx.remove_entries(session_id, None)
        return _status(c)

    async def reorder(
        self, session_id: str, ordered_ids: Sequence[str], expected: int | None
    ) -> QueueStatus:
        async with self.core.change(session_id, expected, session_lock=False, status=True) as c:
            visible = [e.id for e in await c.tx.list_entries(session_id)]
            if len(ordered_ids) != len(set(ordered_ids)) or sorted(ordered_ids) != sorted(visible):
                raise Conflict(
                    ErrorCode.QUEUE_CHANGED,
                    "orderedIds must list exactly the queued entries",
                    ["orderedIds"],
                )
            if list(ordered_ids) != visible:
                await c.tx.reorder_entries(session_id, ordered_ids)
        return _status(c)

    async def set_auto_run(
        self, session_id: str, auto_run: bool, expected_revision: int | None
    ) -> Applied:
        """Q2: OFF never touches the active turn; ON starts the head when eligible (Q3,
        automatic), in the same unit of work: one transaction for the policy, the drain's
        decision and its reservation."""
        # ON decides about the session's turn (its drain): under the session lock. OFF does
        # not, so it never waits for one.
        async with self.core.change(
            session_id, expected_revision, session_lock=auto_run, status=True
        ) as c:
            reason = None if auto_run else PauseReason.USER
            view = c.view
            if (view.policy.auto_run, view.policy.pause_reason) != (auto_run, reason):
                await c.set_policy(auto_run=auto_run, pause_reason=reason)
                view = view.with_policy(
                    QueuePolicy(session_id, auto_run, reason, view.policy.revision)
                )
            result, turn = DrainResult.PAUSED, None
            if auto_run:
                result, turn = await self.turns.reserve_in(c, view, automatic=True)
            if turn is None:  # no reservation: nothing written but the policy
                c.view_now(view)
        if auto_run:
            self.core.metrics.reservation("automatic", result.value)
        return Applied(turn, _status(c))

    async def drain(self, session_id: str, expected_revision: int | None) -> Applied:
        """Q6: needs a promptable session without a clarification; sets auto-run ON first."""
        async with self.core.session_lock(session_id):
            # Two units of work under one session lock: the policy commits even when the
            # targeted start that follows finds the session held or fails (Q6).
            async with self.core.change(
                session_id, expected_revision, session_lock=False, status=True
            ) as c:
                state = c.view.session.state
                if c.view.clarification is not None:
                    raise Conflict(ErrorCode.CLARIFICATION_PENDING, "the agent asked a question")
                if state in BUSY:
                    raise Conflict(ErrorCode.SESSION_BUSY, "a turn is running")
                if state not in PROMPTABLE:
                    raise Conflict(ErrorCode.SESSION_NOT_PROMPTABLE, f"session is {state}")
                if not c.view.policy.auto_run:
                    await c.set_policy(auto_run=True, pause_reason=None)
            _, turn, status = await self.turns.reserve(session_id, automatic=False)
            return Applied(turn, status or _status(c))  # the last commit's status

    async def send_now(
        self,
        session_id: str,
        scope: SendNowScope,
        entry_id: str | None,
        expected_revision: int | None,
    ) -> SendNowResult:
        if scope is SendNowScope.ENTRY and entry_id is None:
            raise InvalidInput("scope ENTRY needs entryId", ["entryId"])
        if scope is SendNowScope.ALL and entry_id is not None:
            raise InvalidInput("scope ALL takes no entryId", ["entryId"])
        # M4: the replacement must stop the owner's agent, so the owner runs the Send Now.
        args = {"s": session_id, "scope": scope.value, "e": entry_id, "x": expected_revision}
        timeout = self.core.settings.cancel_operation_timeout + 5
        try:
            reply = await self.core.ask_owner(session_id, "send_now", args, timeout)
        except OwnerUnreachable as exc:
            raise Conflict(ErrorCode.SESSION_BUSY, "the server running the turn is away") from exc
        if reply is not None:
            turn = None
            if reply["turn"] is not None:
                async with self.core.store.read() as tx:
                    turn = await tx.get_turn(reply["turn"])
            return SendNowResult(turn, int(reply["n"]))
        if self.cancels.busy(session_id):
            raise Conflict(ErrorCode.SEND_NOW_CONFLICT, "a cancellation is already under way")
        observed = self.core.runners.get(session_id)
        observed_turn = observed.turn.id if observed is not None else None
        # Marked synchronously, before any await: an explicit cancel arriving from now on
        # answers SEND_NOW_CONFLICT instead of joining (C3).
        self.cancels.replacements.add(session_id)
        work = self.core.spawn(
            self._replace(session_id, entry_id, expected_revision, observed_turn),
            name=f"send-now:{session_id}",
        )
        work.add_done_callback(lambda _: self.cancels.replacements.discard(session_id))
        # C4: once the claim is accepted the replacement runs to its end without the caller.
        return await asyncio.shield(work)

    async def serve_forwarded(self, args: dict[str, Any]) -> dict[str, Any]:
        result = await self.send_now(
            str(args["s"]), SendNowScope(args["scope"]), args.get("e"), args.get("x")
        )
        return {"turn": result.turn.id if result.turn else None, "n": result.sent_count}

    async def _replace(
        self, session_id: str, entry_id: str | None, expected: int | None, observed: str | None
    ) -> SendNowResult:
        """Send Now of ``entry_id`` (None: every entry) in three transactions when a turn runs
        (``observed`` when it was asked): the claim, with the replacement's CANCELLING hold (C1:
        a cancellation reference); the stopped turn's end; the delivery, which ends the hold (or
        ``Core.reference`` on any other exit, C5). With no turn running, the claim and the
        delivery.

        The claim takes exactly the entries and sets auto-run ON (Q5, Q10) under the session
        lock and the lock row, so nothing starts before the delivery (Q9). Every refusal,
        TURN_CHANGED included (runners change only under that lock; a start elsewhere under the
        lock row, M4), is raised before it writes: the queue keeps its order and policy (Q5)."""
        async with self.core.reference(session_id, HoldReason.CANCELLING) as reference:
            async with self.core.change(session_id, expected) as c:
                view = c.view
                if view.clarification is not None:
                    raise Conflict(ErrorCode.CLARIFICATION_PENDING, "the agent asked a question")
                if view.session.state not in PROMPTABLE and view.session.state not in BUSY:
                    message = f"session is {view.session.state}"
                    raise Conflict(ErrorCode.SESSION_NOT_PROMPTABLE, message)
                visible = await c.tx.list_entries(session_id)
                if entry_id is not None:
                    ids = [_visible(visible, entry_id).id]
                elif not visible:
                    raise Conflict(ErrorCode.QUEUE_EMPTY, "the queue is empty")
                else:
                    ids = [e.id for e in visible]
                runner = self.core.runners.get(session_id)
                if (runner is not None and runner.turn.id != observed) or (
                    runner is None and view.running_turn_id is not None  # started elsewhere (M4)
                ):
                    raise Conflict(ErrorCode.TURN_CHANGED, "the active turn changed meanwhile")
                claimed = await c.tx.claim_entries(session_id, ids, owner=self.core.instance)
                if [e.id for e in claimed] != ids:
                    raise Conflict(ErrorCode.QUEUE_CHANGED, "the queue changed meanwhile")
                await c.set_policy(auto_run=True, pause_reason=None)
                if runner is not None:
                    await reference.take_in(c)
            if runner is not None:
                await self.cancels.stop(runner)
            async with self.core.session_lock(session_id):
                applied = await self._deliver(session_id, claimed, reference)
            return SendNowResult(applied.turn, len(claimed), applied.queue)

    async def _deliver(
        self, session_id: str, claimed: list[QueueEntry], reference: Reference
    ) -> Applied:
        """Start the claimed entries as one turn, ending the replacement's reference in the
        same transaction when it is held; on any failure the entries go back (Q10). Called
        under the session lock."""
        prompt = "\n\n".join(e.content for e in claimed)
        source = claimed[0].source if len(claimed) == 1 else MessageSource.USER
        ids = [e.id for e in claimed]
        try:
            async with self.core.change(session_id, session_lock=False, status=True) as c:
                view = c.view
                if (
                    view.session.state not in PROMPTABLE
                    or view.running_turn_id is not None
                    or session_id in self.core.runners
                ):
                    raise Conflict(ErrorCode.TURN_CHANGED, "another turn started meanwhile")
                # W3: a step change that moved the queue to a new session while the active turn
                # was stopping took the claimed entries with it, released: they run there, at
                # the head of its queue, and never here too (the lock row orders the two).
                if await c.tx.count_in_flight(session_id, ids) != len(claimed):
                    raise Conflict(
                        ErrorCode.QUEUE_CHANGED,
                        "the entry moved to the task's new session with a workflow step change",
                    )
                one = claimed[0] if len(claimed) == 1 else None  # Q16: the entry it runs
                turn = await self.turns.start_in(c, prompt, source, ids, one)
                if reference.held:
                    await reference.end_in(c)
            return Applied(turn, _status(c))
        except BaseException:
            async with self.core.change(session_id, session_lock=False) as c:
                await c.tx.release_entries(session_id, ids)
            raise


def _visible(entries: Sequence[QueueEntry], entry_id: str) -> QueueEntry:
    for entry in entries:
        if entry.id == entry_id:
            return entry
    raise Conflict(ErrorCode.ENTRY_NOT_FOUND, "no such entry in this queue", ["entryId"])
