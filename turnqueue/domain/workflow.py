"""A task's workflow (W rules): its steps, and what a step does when a turn completes."""

from __future__ import annotations

from enum import StrEnum
from itertools import pairwise

from turnqueue.domain.values import value


class OnTurnComplete(StrEnum):
    NONE = "NONE"
    MOVE_TO_NEXT = "MOVE_TO_NEXT"


@value
class WorkflowStep:
    name: str
    on_turn_complete: OnTurnComplete = OnTurnComplete.NONE
    cancel_triggers_turn_complete: bool = False
    new_session_on_enter: bool = False


@value
class Workflow:
    steps: tuple[WorkflowStep, ...] = (
        WorkflowStep("IN_PROGRESS"),
        WorkflowStep("REVIEW"),
        WorkflowStep("DONE"),
    )

    @property
    def first(self) -> WorkflowStep:
        return self.steps[0]

    def step(self, name: str) -> WorkflowStep | None:
        return next((s for s in self.steps if s.name == name), None)

    def next_after(self, name: str) -> WorkflowStep | None:
        return next((b for a, b in pairwise(self.steps) if a.name == name), None)

    @property
    def moves_on_complete(self) -> bool:
        """Whether any step moves its task on when a turn completes (W1)."""
        return any(s.on_turn_complete is OnTurnComplete.MOVE_TO_NEXT for s in self.steps)

    def is_last(self, name: str) -> bool:
        return bool(self.steps) and self.steps[-1].name == name
