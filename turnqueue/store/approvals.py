"""Approval statements of :class:`~turnqueue.store.tx.SqlTx` (A6).

An approval is written when the agent asks (``PENDING``) and answered at most once: the answer
is an ``UPDATE … WHERE outcome = 'PENDING'`` whose row count says whether this answer won, so
two answers racing on different instances cannot both win.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, insert, select, update

from turnqueue.domain import Approval, ApprovalOption, ApprovalOutcome
from turnqueue.store.rows import RowMap, values_of
from turnqueue.store.statement import Record, Statements
from turnqueue.store.tables import approvals

_PENDING = ApprovalOutcome.PENDING.value


_APPROVAL = RowMap(Approval, skip=("options",))


def approval_from(row: Record) -> Approval:
    options = tuple(ApprovalOption(**option) for option in json.loads(row.options))
    return _APPROVAL(row, options=options)


class ApprovalStatements(Statements):
    async def add_approval(self, approval: Approval) -> None:
        options = json.dumps([values_of(option) for option in approval.options])
        values = {**values_of(approval), "options": options}
        await self._conn.execute(insert(approvals).values(**values))
        if approval.outcome is ApprovalOutcome.PENDING:
            self._touched[approval.session_id] = None  # APPROVAL holds its queue (Q9)

    async def answer_approval(
        self,
        approval_id: str,
        *,
        outcome: ApprovalOutcome,
        option_id: str | None,
        answered_by: str | None,
        at: datetime,
    ) -> bool:
        """Answer a PENDING approval; False when it was already answered or does not exist
        (exactly once)."""
        where = approvals.c.id == approval_id
        answer = {"outcome": outcome.value, "option_id": option_id}
        return bool(await self._answer(where, answer, answered_by, at))

    async def settle_approvals(self, turn_id: str, *, answered_by: str, at: datetime) -> int:
        """Answer every PENDING approval of the turn CANCELLED (its turn ended, M6); how many."""
        answer = {"outcome": ApprovalOutcome.CANCELLED.value}
        return await self._answer(approvals.c.turn_id == turn_id, answer, answered_by, at)

    async def _answer(
        self, where: ColumnElement[bool], answer: dict[str, Any], by: str | None, at: datetime
    ) -> int:
        """Answer the PENDING approvals ``where`` picks; how many (their queues are touched)."""
        stmt = (
            update(approvals)
            .where(where, approvals.c.outcome == _PENDING)
            .values(**answer, answered_by=by, answered_at=at)
            .returning(approvals.c.session_id)
        )
        answered = await self._conn.scalars(stmt)
        for session_id in answered:
            self._touched[session_id] = None
        return len(answered)

    async def get_approval(self, approval_id: str) -> Approval | None:
        stmt = select(approvals).where(approvals.c.id == approval_id)
        return await self._conn.maybe(stmt, None, approval_from)

    async def approvals_of_turn(self, turn_id: str) -> list[Approval]:
        stmt = (
            select(approvals)
            .where(approvals.c.turn_id == turn_id)
            .order_by(approvals.c.requested_at, approvals.c.id)
        )
        return [approval_from(row) for row in (await self._conn.execute(stmt)).all()]
