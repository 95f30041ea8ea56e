"""An agent's permission requests of a turn and their answers (A6)."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from turnqueue.domain.values import value


class ApprovalOutcome(StrEnum):
    PENDING = "PENDING"
    SELECTED = "SELECTED"
    CANCELLED = "CANCELLED"


@value
class ApprovalOption:
    id: str
    name: str
    kind: str


@value
class Approval:
    """An agent's permission request of a turn and its answer (A6)."""

    id: str
    session_id: str
    turn_id: str
    title: str
    tool_call_id: str | None
    options: tuple[ApprovalOption, ...]
    requested_at: datetime
    outcome: ApprovalOutcome = ApprovalOutcome.PENDING
    option_id: str | None = None
    answered_by: str | None = None  # a principal, or "policy:allow" / "policy:reject"
    answered_at: datetime | None = None
