"""Workflow steps and their actions (W1–W3): moving tasks, turn-complete actions, queue transfer.

A step change holds the queue of the task's session (WORKFLOW_TRANSITION, Q9) from the moment it
is decided until it has committed; only then does one automatic drain run on the task's current
session (W1).
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Callable
from dataclasses import fields
from pathlib import Path

from turnqueue.domain import (
    CancelKind,
    HoldReason,
    OnTurnComplete,
    PauseReason,
    Session,
    SessionState,
    Task,
    Workflow,
    WorkflowStep,
)
from turnqueue.engine.cancel import Cancels
from turnqueue.engine.core import Core
from turnqueue.engine.turns import Turns
from turnqueue.errors import InvalidInput, NotFound


def load_workflow(path: Path | None) -> Workflow:
    """The default workflow, or the steps of a TOML or JSON file: ``[[steps]]`` tables with
    ``name``, ``on_turn_complete`` (NONE | MOVE_TO_NEXT), ``cancel_triggers_turn_complete`` and
    ``new_session_on_enter``."""
    if path is None:
        return Workflow()
    text = path.read_text(encoding="utf-8")
    data = json.loads(text) if path.suffix == ".json" else tomllib.loads(text)
    raw_steps = data.get("steps")
    if not isinstance(raw_steps, list) or not raw_steps:
        raise ValueError(f"{path}: a workflow needs a non-empty list of steps")
    steps = []
    for raw in raw_steps:
        unknown = set(raw) - {f.name for f in fields(WorkflowStep)}
        if unknown:
            raise ValueError(f"{path}: unknown step keys {sorted(unknown)}")
        steps.append(
            WorkflowStep(
                name=str(raw["name"]),
                on_turn_complete=OnTurnComplete(raw.get("on_turn_complete", "NONE")),
                cancel_triggers_turn_complete=bool(raw.get("cancel_triggers_turn_complete")),
                new_session_on_enter=bool(raw.get("new_session_on_enter")),
            )
        )
    if len({s.name for s in steps}) != len(steps):
        raise ValueError(f"{path}: step names must be unique")
    return Workflow(tuple(steps))


class Workflows:
    def __init__(
        self,
        core: Core,
        turns: Turns,
        cancels: Cancels,
        close_agent: Callable[[str, str], None],
    ) -> None:
        self.core = core
        self.turns = turns
        self.cancels = cancels
        #: (session id, agent profile): the session ended; close and stop its agent (A2, A8)
        self.close_agent = close_agent

    async def _task_of(self, session_id: str) -> Task:
        async with self.core.store.read() as tx:
            session = await tx.get_session(session_id)
            task = await tx.get_task(session.task_id) if session else None
        if task is None:
            raise NotFound("session")
        return task

    async def moves_on_complete(self, session_id: str) -> bool:
        if not self.core.workflow.moves_on_complete:
            return False  # no step moves on completion: no read per turn end
        task = await self._task_of(session_id)
        step = self.core.workflow.step(task.workflow_step)
        return (
            step is not None
            and step.on_turn_complete is OnTurnComplete.MOVE_TO_NEXT
            and task.current_session_id == session_id
            and self.core.workflow.next_after(step.name) is not None
        )

    async def on_completed(self, session_id: str) -> None:
        """W1: run the step's turn-complete action (the caller already holds the queue), then
        one automatic drain once the step change has committed."""
        try:
            task = await self._task_of(session_id)
            following = self.core.workflow.next_after(task.workflow_step)
            if following is not None:
                await self.enter(task, following)
        finally:
            await self.core.release_hold(session_id, HoldReason.WORKFLOW_TRANSITION)
        await self._drain_current(task.id, session_id)

    async def moves_on_cancel(self, session_id: str) -> bool:
        """W2: a user's cancel completes the step only when the step says so."""
        task = await self._task_of(session_id)
        step = self.core.workflow.step(task.workflow_step)
        return (
            step is not None
            and step.cancel_triggers_turn_complete
            and step.on_turn_complete is OnTurnComplete.MOVE_TO_NEXT
        )

    async def move_task(self, task: Task, step_name: str) -> tuple[Task, Session]:
        step = self.core.workflow.step(step_name)
        if step is None:
            names = ", ".join(s.name for s in self.core.workflow.steps)
            raise InvalidInput(f"unknown step {step_name!r}; steps are {names}", ["step"])
        source_id = task.current_session_id
        task = await self.enter(task, step)
        await self._drain_current(task.id, source_id)
        async with self.core.store.read() as tx:
            current = await tx.get_task(task.id)
            assert current is not None and current.current_session_id is not None
            session = await tx.get_session(current.current_session_id)
        assert session is not None
        return current, session

    async def enter(self, task: Task, step: WorkflowStep) -> Task:
        source_id = task.current_session_id
        assert source_id is not None
        async with self.core.hold(source_id):  # WORKFLOW_TRANSITION (Q9)
            if step.new_session_on_enter:
                return await self._transfer(task, step, source_id)
            # Under no session lock: a step change starts and ends no turn.
            async with self.core.change(source_id, session_lock=False) as c:
                moved = await c.tx.set_task_step(task.id, step.name, source_id)
                last = self.core.workflow.is_last(step.name)
                if last and c.view.session.state is SessionState.WAITING_FOR_INPUT:
                    await c.tx.set_session_state(source_id, SessionState.COMPLETED)
                else:
                    # Reaching the last step while a turn runs completes the session when that
                    # turn ends (durably: the end may come after a restart, by recovery);
                    # leaving the last step before then takes it back.
                    running = c.view.session.state is SessionState.RUNNING
                    await c.tx.set_complete_on_idle(source_id, last and running)
            return moved

    async def _transfer(self, task: Task, step: WorkflowStep, source_id: str) -> Task:
        """W3: a new session takes the queue; the source completes and loses its policy row."""
        runner = self.core.runners.get(source_id)
        if runner is not None:
            async with self.core.hold(source_id, CancelKind.INTERNAL):  # C1, C8
                await self.cancels.stop(runner)
        async with self.core.change(source_id, session_lock=False) as c:
            source = c.view
            tx = c.tx
            destination = await tx.create_session(
                task_id=task.id, agent=source.session.agent, state=SessionState.WAITING_FOR_INPUT
            )
            d = await c.join(destination.id)
            await tx.release_entries(source_id, None)  # nothing in flight may stay behind
            moved_entries = await tx.move_entries(source_id, destination.id)
            # Q7: an explicit cancel accepted on the source (its mark) parks what it leaves
            # queued, wherever the queue goes: the pause carries over, as when the cancel
            # itself moves the task (W2); the cancel's own park then finds nothing left.
            parked = source.cancel_mark is not None and moved_entries > 0
            if parked or not source.policy.auto_run:  # destination = source AND destination
                await tx.set_policy(
                    destination.id, auto_run=False, pause_reason=PauseReason.TRANSFER
                )
            await tx.delete_policy(source_id)
            await tx.set_session_state(source_id, SessionState.COMPLETED)
            moved = await tx.set_task_step(task.id, step.name, destination.id)
            for unit in (c, d):
                await unit.queue_changed()
            d.session_changed()  # a new session: its first revision
        # A2, A8: the completed session's agent session is closed and its process (an acp
        # profile keeps one) stopped; the new session starts its own on its first prompt.
        self.close_agent(source_id, source.session.agent)
        return moved

    async def _drain_current(self, task_id: str, source_id: str | None) -> None:
        """W1: one automatic drain of the task's current session once the step change has
        committed — and of the session it left, when a transfer (W3) replaced it: a prompt
        queued there while the change held it (COMPLETED is promptable) runs there (Q9)."""
        async with self.core.store.read() as tx:
            task = await tx.get_task(task_id)
        if task is None or task.current_session_id is None:
            return
        for session_id in dict.fromkeys((task.current_session_id, source_id)):
            if session_id is not None:
                async with self.core.session_lock(session_id):
                    await self.turns.reserve(session_id)
