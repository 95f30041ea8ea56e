"""What a turn's end means: a pure decision, no database (C8, Q4, Q9, W1), taken once under
the session lock whatever the number of attempts to commit it (test_turn_end_decision.py).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from turnqueue.agents import AgentResult
from turnqueue.domain import AgentErrorKind, Session, TurnStatus
from turnqueue.store import SessionView


@dataclass(frozen=True, slots=True)
class TurnEnd:
    """What a turn's end means (decided once, whatever the number of attempts to commit it)."""

    status: TurnStatus
    error: str | None
    question: str | None
    pending: bool  # a cancellation was pending (C8): recorded CANCELLED, nothing drains
    moving: bool = False  # the task moves on (W1): it drains once the move has committed
    unchecked: bool = False  # the workflow guard could not be read (Q9: it holds)
    error_kind: AgentErrorKind | None = None  # A11: a FAILED turn's classification
    stderr: str | None = None  # A11: the agent's stderr during the turn, apart from ``error``

    @property
    def asks_workflow(self) -> bool:
        """W1: only a completion without a question can move the task on."""
        return self.status is TurnStatus.COMPLETED and self.question is None

    @property
    def drains(self) -> bool:
        """Q4: the end's own transaction starts the next entry (when the queue lets it)."""
        return not (self.pending or self.moving or self.unchecked)


def decide_end(result: AgentResult, *, pending: bool) -> TurnEnd:
    """C8: pending wins over the agent's own outcome; a question only comes with a completion."""
    if pending:
        status = TurnStatus.CANCELLED
    elif result.ok:
        status = TurnStatus.COMPLETED
    else:
        status = TurnStatus.FAILED
    question = result.clarification if status is TurnStatus.COMPLETED else None
    error = None if status is TurnStatus.COMPLETED else (result.error or "cancelled")
    kind = result.error_kind if status is TurnStatus.FAILED else None
    return TurnEnd(status, error, question, pending, error_kind=kind, stderr=result.stderr)


def with_move(end: TurnEnd, moves: bool | None) -> TurnEnd:
    """W1 and Q9: what the workflow guard said (None: it could not be read, so it holds)."""
    if not end.asks_workflow:
        return end
    if moves is None:
        return replace(end, unchecked=True)
    return replace(end, moving=moves)


def given_up(end: TurnEnd) -> TurnEnd:
    """At shutdown an end that cannot commit is given up: it is reported FAILED (recovery ends
    it at the next start, M6) and moves nothing."""
    return replace(end, status=TurnStatus.FAILED, moving=False)


def view_after_end(
    before: SessionView, session: Session, turn_id: str, question: str | None
) -> SessionView | None:
    """The locked view after the end, for its drain (Q4), or None when it must be read again.

    When the locked view saw this turn running, the end changed only the turn and the session
    (the lock row keeps every other writer out): the view is ``before`` with the ended session
    and no running turn. A question (a new clarification) or a view that did not show this turn
    running needs a fresh read."""
    if question is None and before.running_turn_id == turn_id:
        return replace(before, session=session, running_turn_id=None, running_turn_owner=None)
    return None
