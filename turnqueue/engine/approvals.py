"""Approvals (A6): an ACP agent's ``session/request_permission`` as a pending approval of its
turn, answered once by ``answerApproval``. The ACP agent calls :meth:`Approvals.ask` (bound as
``AcpAgent.approvals``) and awaits it; per the profile's policy, ``allow`` / ``reject`` answer at
once (``policy:allow|reject``), ``ask`` stores it PENDING (``heldBy: APPROVAL``, a new session
revision) until :meth:`Approvals.resolve`, the turn's end (CANCELLED), or the profile's
``approval_timeout`` (A10: answered by ``system`` with the agent's reject option).

Hazards:
- *Exactly once.* The answer is the store's conditional ``UPDATE … WHERE outcome = 'PENDING'``:
  of racing answers (here or on other instances) one wins, the others get APPROVAL_RESOLVED.
  An expiry (A10) races a user's answer the same way, under the same session lock.
- *Any instance (M4).* Only the instance running the turn holds the agent's waiting call, so an
  answer received elsewhere is forwarded to that owner and resolved there.
- *The queue must not stay held.* APPROVAL is read from the rows: a PENDING approval of the
  running turn. An approval cancelled by a cancel may release its hold only after that
  cancel's drain ran (and was held by it), so releasing runs an automatic drain itself (Q4).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from turnqueue.agents.acp import AcpAgent
from turnqueue.agents.acp_run import POLICY_KINDS, PermissionRequest, policy_option
from turnqueue.domain import (
    Approval,
    ApprovalOption,
    ApprovalOutcome,
    TurnStatus,
    is_valid_id,
    new_id,
    utcnow,
)
from turnqueue.engine.cluster import OwnerUnreachable
from turnqueue.engine.core import Core
from turnqueue.engine.turns import Turns
from turnqueue.engine.unit_of_work import Change
from turnqueue.errors import Conflict, ErrorCode, InvalidInput, NotFound

log = logging.getLogger(__name__)

#: A10: who answers an expired approval.
SYSTEM = "system"


@dataclass(eq=False)
class _Waiting:
    approval: Approval
    future: asyncio.Future[str | None]


class Approvals:
    def __init__(self, core: Core, turns: Turns) -> None:
        self.core = core
        self.turns = turns
        self._waiting: dict[str, _Waiting] = {}  # approval id → its waiting agent
        for agent in self.core.agents.values():
            if isinstance(agent, AcpAgent):
                agent.approvals = self.ask

    async def ask(self, request: PermissionRequest) -> str | None:
        """The option the agent gets, or None for ``cancelled``."""
        approval = Approval(
            id=new_id(),
            session_id=request.session_id,
            turn_id=request.turn_id,
            title=request.title,
            tool_call_id=request.tool_call_id,
            options=tuple(ApprovalOption(*o) for o in request.options),
            requested_at=utcnow(),
        )
        if request.policy in POLICY_KINDS:
            chosen = policy_option(request.policy, request.options)
            answered = _answered(
                approval, chosen, f"policy:{request.policy}", approval.requested_at
            )
            # Not a unit of work (``core.change``): an approval answered at once changes no
            # session, holds nothing and moves no revision; it is only recorded (A6).
            async with self.core.store.transaction() as tx:
                await tx.add_approval(answered)
            return chosen
        waiting = _Waiting(approval, asyncio.get_running_loop().create_future())
        sid = approval.session_id
        given_up_by: str | None = None  # who gave up on it, when not the agent
        try:
            async with self.core.change(sid) as c:
                await c.tx.add_approval(approval)
                self._waiting[approval.id] = waiting
                await _changed(c)
            if request.timeout is not None:
                # Not wait_for: the future must stay answerable until the expiry has committed.
                await asyncio.wait({waiting.future}, timeout=request.timeout)
                if not waiting.future.done():
                    try:
                        await self.expire(approval.id)
                    except Exception:
                        # A10: the expiry did not commit (the database away): the agent gets
                        # ``cancelled``, and the approval is stored CANCELLED by ``system``.
                        log.exception("could not expire approval %s", approval.id)
                        given_up_by = SYSTEM
                        return None
            return await waiting.future
        finally:
            if self._waiting.pop(approval.id, None) is not None:
                # Cancelled by the agent (A5: cancel, or the turn ended), or an expiry that
                # could not commit: stored CANCELLED (a conditional update: at most once).
                await asyncio.shield(self._release(approval, answered_by=given_up_by))

    async def expire(self, approval_id: str) -> bool:
        """A10: answer a pending approval as expired, now: with its reject option, by
        ``system`` (its timer calls this). False when it is not waiting on this instance or a
        user's answer got there first (the agent then gets that one). Raises when the answer
        cannot commit: nothing was answered (its timer then gives the agent ``cancelled``)."""
        waiting = self._waiting.get(approval_id)
        if waiting is None:
            return False
        approval = waiting.approval
        sid = approval.session_id
        rejects = POLICY_KINDS["reject"]  # reject_once, else reject_always
        chosen = next((o.id for kind in rejects for o in approval.options if o.kind == kind), None)
        async with self.core.session_lock(sid):
            if self._waiting.get(approval_id) is not waiting or waiting.future.done():
                return False  # a user's answer won (it is set under this lock)
            async with self.core.change(sid, session_lock=False) as c:  # held just above
                won = await _answer(c, approval_id, chosen, SYSTEM, utcnow())
                if not won:  # settled in the rows meanwhile (recovery elsewhere): as it says
                    current = await c.tx.get_approval(approval_id)
                    chosen = current.option_id if current is not None else None
            # Only once committed: an expiry that did not commit answered nothing, and the
            # agent's exit (``ask``) finds the entry and stores the approval CANCELLED.
            del self._waiting[approval_id]
            waiting.future.set_result(chosen)
        log.info("approval %s expired; answered %s", approval_id, chosen or "cancelled")
        return won

    async def _release(self, approval: Approval, answered_by: str | None) -> None:
        sid = approval.session_id
        try:
            async with self.core.session_lock(sid):
                async with self.core.change(sid, session_lock=False) as c:  # held just above
                    await _answer(c, approval.id, None, answered_by, utcnow())
                await self.turns.reserve(sid)  # the hold may have held the turn end's drain
        except Exception:
            log.exception("could not release approval %s", approval.id)

    async def find(self, approval_id: str) -> Approval:
        """The approval (not yet authorised: the caller checks its session's owner)."""
        if not is_valid_id(approval_id):
            raise InvalidInput("approvalId is not a valid id", ["approvalId"])
        async with self.core.store.read() as tx:
            approval = await tx.get_approval(approval_id)
        if approval is None:
            raise NotFound("approval", ["approvalId"])
        return approval

    async def resolve(
        self, principal: str, approval: Approval, option_id: str, *, forwarded: bool = False
    ) -> Approval:
        """Answer a pending approval with ``option_id``, exactly once (A6), on the instance
        running its turn (forwarded there when that is another one)."""
        if option_id not in {o.id for o in approval.options}:
            known = ", ".join(o.id for o in approval.options)
            raise InvalidInput(f"optionId must be one of: {known}", ["optionId"])
        sid = approval.session_id
        pending = approval.outcome is ApprovalOutcome.PENDING
        if not forwarded and pending and approval.id not in self._waiting:
            # Its agent waits on the instance running the turn: that one answers (a forwarded
            # answer races a local one under the same conditional update). An owner that died
            # before taking the request leaves it here, where it is refused (the turn is gone).
            args = {"a": approval.id, "o": option_id, "p": principal}
            timeout = max(5.0, self.core.settings.lease_seconds)
            try:
                reply = await self.core.ask_owner(sid, "answer_approval", args, timeout)
            except OwnerUnreachable:
                log.warning("the owner of approval %s did not answer", approval.id)
                raise Conflict(
                    ErrorCode.SESSION_BUSY,
                    "the instance running the approval's turn did not answer; try again",
                ) from None
            if reply is not None:
                at = datetime.fromisoformat(reply["at"])
                return _answered(approval, option_id, principal, at)
        async with self.core.session_lock(sid):
            waiting = self._waiting.get(approval.id)
            if approval.outcome is not ApprovalOutcome.PENDING or (
                waiting is not None and waiting.future.done()
            ):
                raise _resolved()
            now = utcnow()
            try:
                async with self.core.change(sid, session_lock=False) as c:  # held just above
                    tx = c.tx
                    current = await tx.get_approval(approval.id)
                    if current is None or current.outcome is not ApprovalOutcome.PENDING:
                        raise _resolved()  # answered meanwhile (here, or on another instance)
                    if waiting is None:
                        turn = await tx.get_turn(approval.turn_id)
                        if turn is None or turn.status is not TurnStatus.RUNNING:
                            raise _resolved()
                        raise Conflict(
                            ErrorCode.SESSION_BUSY,
                            "the instance running the approval's turn cannot answer it now",
                        )
                    if not await _answer(c, approval.id, option_id, principal, now):
                        raise _resolved()
                    del self._waiting[approval.id]
            except BaseException:
                if waiting is not None and approval.id not in self._waiting:
                    self._unanswered(approval, waiting)
                raise
            if not waiting.future.done():
                waiting.future.set_result(option_id)
        return _answered(approval, option_id, principal, now)

    def _unanswered(self, approval: Approval, waiting: _Waiting) -> None:
        """An answer taken off ``_waiting`` did not commit (the database away), under the
        session lock: the entry comes back (the approval is still PENDING in the rows), so the
        agent still waits and a retry can answer it. If the agent gave up meanwhile, its exit
        found no entry to release: the approval is stored CANCELLED here, once the lock is
        free."""
        if not waiting.future.done():
            self._waiting[approval.id] = waiting
        else:
            release = self._release(approval, answered_by=None)
            self.core.spawn(release, name=f"approval-release:{approval.id}")

    async def serve_forwarded(self, args: dict[str, Any]) -> dict[str, Any]:
        """The owner's side of a forwarded answer (authorised where it was received)."""
        approval = await self.find(str(args["a"]))
        answered = await self.resolve(str(args["p"]), approval, str(args["o"]), forwarded=True)
        assert answered.answered_at is not None
        return {"at": answered.answered_at.isoformat()}


async def _changed(c: Change) -> None:
    """A new session revision (pendingApproval changed) and queue revision (heldBy)."""
    await c.tx.bump_session(c.session_id)
    await c.queue_changed()


async def _answer(
    c: Change, approval_id: str, option_id: str | None, by: str | None, at: datetime
) -> bool:
    """Answer a PENDING approval with ``option_id`` (None: CANCELLED) in ``c``; False when it
    was answered already (exactly once: of racing answers, one wins)."""
    outcome = ApprovalOutcome.CANCELLED if option_id is None else ApprovalOutcome.SELECTED
    won = await c.tx.answer_approval(
        approval_id, outcome=outcome, option_id=option_id, answered_by=by, at=at
    )
    await _changed(c)
    return won


def _answered(approval: Approval, option_id: str | None, by: str, at: datetime) -> Approval:
    """``approval`` as answered with ``option_id`` (None: CANCELLED) by ``by`` at ``at``."""
    outcome = ApprovalOutcome.CANCELLED if option_id is None else ApprovalOutcome.SELECTED
    return replace(approval, outcome=outcome, option_id=option_id, answered_by=by, answered_at=at)


def _resolved() -> Conflict:
    return Conflict(
        ErrorCode.APPROVAL_RESOLVED,
        "the approval was already answered, or its turn has ended",
        ["approvalId"],
    )
