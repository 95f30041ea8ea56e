"""Workflow steps (``engine/workflow.py``): the lines its mutation run (issue 12) found
unguarded. Each test names the rule it proves; ``tests/MUTANTS.md`` lists the mutants each kills.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from engine_helpers import PRINCIPAL, WAIT, ManualAgent, new_session, next_event, settle
from faults import faults_of
from test_queue_refusals import refusal
from test_queue_rules import enqueue
from test_workflow_rules import WORKFLOW

from turnqueue.bus import EventKind
from turnqueue.domain import HoldReason, OnTurnComplete, TurnStatus
from turnqueue.engine import Engine
from turnqueue.engine.unit_of_work import held_by
from turnqueue.engine.workflow import load_workflow
from turnqueue.errors import ErrorCode, StoreError
from turnqueue.settings import Settings
from turnqueue.store.tx import SqlTx
from turnqueue.timeouts import within

#: a completion moves the task on within the same session (no W3 transfer)
IN_PLACE = """
[[steps]]
name = "WRITE"
on_turn_complete = "MOVE_TO_NEXT"

[[steps]]
name = "CHECK"

[[steps]]
name = "DONE"
"""


async def _engine_with(
    text: str, tmp_path: Path, engine_settings: Settings, open_engine: Any
) -> Engine:
    path = tmp_path / "workflow.toml"
    path.write_text(text)
    engine: Engine = await open_engine(engine_settings.model_copy(update={"workflow_file": path}))
    return engine


async def moved_on(engine: Engine, session_id: str) -> None:
    """Until a step change handed the session's hold (W1) has committed and released it."""
    with engine.bus.subscribe(session_id, [EventKind.QUEUE]) as sub:
        while HoldReason.WORKFLOW_TRANSITION in (await engine.queue_status(session_id)).held_by:
            await next_event(sub, EventKind.QUEUE)


async def test_moving_a_task_to_an_unknown_step_names_the_steps_and_changes_nothing(
    engine: Engine,
) -> None:
    """SPEC §5: moving a task to an unknown step is INVALID_INPUT on the field ``step``; the
    message names the workflow's steps, and the task stays where it was."""
    task, _ = await new_session(engine)
    assert await refusal(engine.move_task(PRINCIPAL, task.id, "NOWHERE")) == (
        ErrorCode.INVALID_INPUT,
        "unknown step 'NOWHERE'; steps are IN_PROGRESS, REVIEW, DONE",
        ["step"],
    )
    same = await engine.task(PRINCIPAL, task.id)
    assert same is not None and same.workflow_step == task.workflow_step


async def test_w1_a_move_in_place_releases_its_hold_and_drains_the_same_session(
    tmp_path: Path, engine_settings: Settings, open_engine: Any, agent: ManualAgent
) -> None:
    """W1/Q9: a completion that moves the task to a step without a new session holds the
    queue (WORKFLOW_TRANSITION) until the move has committed, then releases it: the one
    automatic drain starts the next entry on the same session, and nothing is held after."""
    engine = await _engine_with(IN_PLACE, tmp_path, engine_settings, open_engine)
    task, session = await new_session(engine)
    sid = session.id
    await engine.send_message(PRINCIPAL, sid, "write it")
    run = await agent.next_run()
    await enqueue(engine, sid, "next")
    run.complete()
    successor = await agent.next_run()
    assert (successor.prompt, successor.session_id) == ("next", sid)
    moved = await engine.task(PRINCIPAL, task.id)
    assert moved is not None and moved.workflow_step == "CHECK"
    assert moved.current_session_id == sid
    successor.complete()
    await settle(engine, sid)
    assert (await engine.queue_status(sid)).held_by == ()


#: a completion (or a cancel, W2) on WRITE moves the task into a step with a new session (W3)
INTO_TRANSFER = """
[[steps]]
name = "WRITE"
on_turn_complete = "MOVE_TO_NEXT"
cancel_triggers_turn_complete = true

[[steps]]
name = "HANDOFF"
new_session_on_enter = true

[[steps]]
name = "DONE"
"""


@pytest.mark.parametrize(
    ("workflow", "how"),
    [(IN_PLACE, "complete"), (INTO_TRANSFER, "complete"), (INTO_TRANSFER, "cancel")],
    ids=["w1-in-place", "w1-transfer", "w2-transfer"],
)
async def test_q9_q13_a_handed_step_change_hold_ends_with_a_revision_of_its_own(
    workflow: str,
    how: str,
    tmp_path: Path,
    engine_settings: Settings,
    open_engine: Any,
    agent: ManualAgent,
) -> None:
    """Q9/Q13 with W1/W2/W3: the WORKFLOW_TRANSITION hold a turn's end (W1) or a cancel (W2)
    hands to its step change ends with a queue revision of its own, so the session's last
    revision is not served with the hold for good. Found by the model test: a cancel that
    transferred the task left the completed source session ``heldBy: [WORKFLOW_TRANSITION]``
    (the step change's own hold had bumped the revision while the handed one still held)."""
    engine = await _engine_with(workflow, tmp_path, engine_settings, open_engine)
    _, session = await new_session(engine)
    sid = session.id
    await engine.send_message(PRINCIPAL, sid, "write it")
    run = await agent.next_run()
    moved = asyncio.Event()
    on_completed = engine.turns.on_completed
    assert on_completed is not None

    async def observed(session_id: str) -> None:  # the step change a completion hands over
        await on_completed(session_id)
        moved.set()

    engine.turns.on_completed = observed
    if how == "complete":
        run.complete()
        await within(moved.wait(), WAIT)
    else:
        await engine.cancel(PRINCIPAL, sid)  # returns once its step change has ended (W2)
    status = await engine.queue_status(sid)
    assert status.held_by == ()


async def test_w3_c1_c8_a_transfer_stops_the_running_turn_as_a_cancellation(
    tmp_path: Path, engine_settings: Settings, open_engine: Any, agent: ManualAgent
) -> None:
    """W3/C1/C8: entering a step with a new session stops the source's running turn under an
    internal cancellation reference on the source: its flag is pending while the stop runs
    (C1), so the turn ends CANCELLED (C8) rather than failed by the signal."""
    flow = await _engine_with(WORKFLOW, tmp_path, engine_settings, open_engine)
    task, source = await new_session(flow)
    await flow.send_message(PRINCIPAL, source.id, "plan it")
    run = await agent.next_run()
    seen: list[bool] = []

    async def observed(sig: Any) -> None:
        seen.append((await flow.cancellation(source.id)).pending)

    run.before_signal = observed
    await flow.move_task(PRINCIPAL, task.id, "BUILD")
    assert seen and all(seen)
    (turn,) = await flow.turns_of(source.id, 5)
    assert (turn.prompt, turn.status) == ("plan it", TurnStatus.CANCELLED)
    assert (await flow.cancellation(source.id)).pending is False


async def test_w1_q9_a_step_change_that_fails_still_releases_the_queue(
    tmp_path: Path, engine_settings: Settings, open_engine: Any, agent: ManualAgent
) -> None:
    """W1/Q9: the WORKFLOW_TRANSITION hold a completion hands to its step change is released
    on every exit of the change: when the change fails (its read of the task raises), the
    queue is not held for good — a later prompt starts a turn."""
    engine = await _engine_with(IN_PLACE, tmp_path, engine_settings, open_engine)
    _, session = await new_session(engine)
    sid = session.id
    await engine.send_message(PRINCIPAL, sid, "write it")
    run = await agent.next_run()
    calls = 0
    failed = asyncio.Event()

    async def failing_second_read(task_id: str) -> None:
        nonlocal calls
        calls += 1
        if calls == 2:  # the first is the guard's (moves_on_complete), then the change's
            failed.set()
            raise StoreError("the database is away")

    with faults_of(engine).before("get_task", failing_second_read):
        run.complete()
        await within(failed.wait(), WAIT)
    await settle(engine, sid)
    await moved_on(engine, sid)  # released, though the change failed
    admission = await engine.send_message(PRINCIPAL, sid, "again")
    assert admission.turn is not None and (await agent.next_run()).prompt == "again"


async def test_w1_q9_a_step_change_holds_the_sessions_queue_while_it_commits(
    tmp_path: Path,
    engine_settings: Settings,
    open_engine: Any,
    agent: ManualAgent,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """W1/Q9: a step change holds its session's queue (WORKFLOW_TRANSITION) from before it
    writes the new step until it has committed, and releases it after."""
    engine = await _engine_with(IN_PLACE, tmp_path, engine_settings, open_engine)
    task, session = await new_session(engine)
    holds: list[tuple[str, ...]] = []
    set_task_step = SqlTx.set_task_step

    async def observed(self: SqlTx, *args: Any, **kwargs: Any) -> Any:
        view = await self.view(session.id)
        assert view is not None
        holds.append(held_by(view))
        return await set_task_step(self, *args, **kwargs)

    monkeypatch.setattr(SqlTx, "set_task_step", observed)
    moved, _ = await engine.move_task(PRINCIPAL, task.id, "CHECK")
    assert moved.workflow_step == "CHECK"
    assert holds == [("WORKFLOW_TRANSITION",)]
    assert (await engine.queue_status(session.id)).held_by == ()


async def test_w1_only_a_move_to_next_step_moves_on_completion(
    tmp_path: Path, engine_settings: Settings, open_engine: Any, agent: ManualAgent
) -> None:
    """W1: a completion runs its step's ``on_turn_complete``: in WRITE (MOVE_TO_NEXT) it moves
    the task to CHECK; in CHECK (NONE, though a step follows) it moves nothing."""
    engine = await _engine_with(IN_PLACE, tmp_path, engine_settings, open_engine)
    task, session = await new_session(engine)
    sid = session.id
    await engine.send_message(PRINCIPAL, sid, "write it")
    (await agent.next_run()).complete()
    await settle(engine, sid)
    await moved_on(engine, sid)
    moved = await engine.task(PRINCIPAL, task.id)
    assert moved is not None and moved.workflow_step == "CHECK"
    await engine.send_message(PRINCIPAL, sid, "check it")
    (await agent.next_run()).complete()
    await settle(engine, sid)
    await moved_on(engine, sid)
    stays = await engine.task(PRINCIPAL, task.id)
    assert stays is not None and stays.workflow_step == "CHECK"


async def test_w2_a_cancel_moves_nothing_where_only_a_completion_moves(
    tmp_path: Path, engine_settings: Settings, open_engine: Any, agent: ManualAgent
) -> None:
    """W2: a user's cancel runs the turn-complete action only when the step sets
    ``cancel_triggers_turn_complete``; MOVE_TO_NEXT alone (WRITE) moves on completion, not on
    a cancel."""
    engine = await _engine_with(IN_PLACE, tmp_path, engine_settings, open_engine)
    task, session = await new_session(engine)
    await engine.send_message(PRINCIPAL, session.id, "write it")
    await agent.next_run()
    result = await engine.cancel(PRINCIPAL, session.id)
    assert result.outcome.value == "STOPPED"
    stays = await engine.task(PRINCIPAL, task.id)
    assert stays is not None and stays.workflow_step == "WRITE"


def test_a_json_workflow_file_loads_like_a_toml_one(tmp_path: Path) -> None:
    """SPEC §5: a workflow file (TOML, or JSON by its suffix) defines the steps and their
    actions; an action not given is off."""
    path = tmp_path / "workflow.json"
    steps = [
        {"name": "A", "on_turn_complete": "MOVE_TO_NEXT", "cancel_triggers_turn_complete": True},
        {"name": "B", "new_session_on_enter": True},
    ]
    path.write_text(json.dumps({"steps": steps}))
    loaded = load_workflow(path)
    assert [
        (s.name, s.on_turn_complete, s.cancel_triggers_turn_complete, s.new_session_on_enter)
        for s in loaded.steps
    ] == [("A", OnTurnComplete.MOVE_TO_NEXT, True, False), ("B", OnTurnComplete.NONE, False, True)]


@pytest.mark.parametrize(
    "text", ["steps = []", 'steps = "A"', 'name = "A"'], ids=["empty", "not-a-list", "missing"]
)
def test_a_workflow_file_needs_a_non_empty_list_of_steps(tmp_path: Path, text: str) -> None:
    """SPEC §5: a workflow file without a non-empty list of steps is refused, naming the file."""
    path = tmp_path / "workflow.toml"
    path.write_text(text)
    with pytest.raises(ValueError) as info:
        load_workflow(path)
    assert str(info.value) == f"{path}: a workflow needs a non-empty list of steps"


def test_a_workflow_files_bad_steps_are_refused_with_what_is_wrong(tmp_path: Path) -> None:
    """SPEC §5: unknown step keys are named; step names must be unique."""
    path = tmp_path / "workflow.toml"
    path.write_text('[[steps]]\nname = "A"\nsurprise = 1\nextra = 2\n')
    with pytest.raises(ValueError) as info:
        load_workflow(path)
    assert str(info.value) == f"{path}: unknown step keys ['extra', 'surprise']"
    path.write_text('[[steps]]\nname = "A"\n\n[[steps]]\nname = "A"\n')
    with pytest.raises(ValueError) as info:
        load_workflow(path)
    assert str(info.value) == f"{path}: step names must be unique"


@pytest.mark.parametrize("how", ["move", "complete"])
async def test_w3_q9_a_prompt_sent_to_the_source_while_a_transfer_holds_it_runs_there(
    how: str, tmp_path: Path, engine_settings: Settings, open_engine: Any, agent: ManualAgent
) -> None:
    """W3/Q9 (with W1): a prompt sent to the source session after a transfer has committed,
    while the step change still holds it (WORKFLOW_TRANSITION), waits in the source's queue
    (COMPLETED is promptable) and runs there in the one drain after the release — for a
    ``moveTask`` and for a completion's move alike — instead of staying queued for good."""
    engine = await _engine_with(INTO_TRANSFER, tmp_path, engine_settings, open_engine)
    task, source = await new_session(engine)
    sid = source.id
    admissions: list[Any] = []

    async def late_prompt() -> None:  # the transfer has committed; its hold is still taken
        admissions.append(await engine.send_message(PRINCIPAL, sid, "late"))

    with faults_of(engine).after_commit("move_entries", late_prompt):
        if how == "move":
            await engine.move_task(PRINCIPAL, task.id, "HANDOFF")
        else:
            await engine.send_message(PRINCIPAL, sid, "write it")
            (await agent.next_run()).complete()
        late = await agent.next_run()
    (queued,) = admissions
    assert queued.turn is None  # it waited behind the hold ...
    assert (late.prompt, late.session_id) == ("late", sid)  # ... then ran on the source
    moved = await engine.task(PRINCIPAL, task.id)
    assert moved is not None and moved.workflow_step == "HANDOFF"
    assert moved.current_session_id != sid


@dataclass
class ClosingAgent(ManualAgent):
    """A ManualAgent that, like an acp profile's, closes a session's agent when it ends (A2)."""

    closed: asyncio.Queue[str] = field(default_factory=asyncio.Queue)

    async def close_session(self, session_id: str) -> None:
        self.closed.put_nowait(session_id)


async def test_a2_a8_a_transfer_closes_the_source_sessions_agent(
    tmp_path: Path, engine_settings: Settings, open_engine: Any
) -> None:
    """A2/A8 with W3: entering a step with a new session closes the completed source session's
    agent session (the profile's ``close_session``, with the source's id); the new session
    starts its own on its first prompt."""
    closing = ClosingAgent()
    path = tmp_path / "workflow.toml"
    path.write_text(INTO_TRANSFER)
    engine: Engine = await open_engine(
        engine_settings.model_copy(update={"workflow_file": path}), closing
    )
    task, source = await new_session(engine)
    _, destination = await engine.move_task(PRINCIPAL, task.id, "HANDOFF")
    assert destination.id != source.id
    assert await within(closing.closed.get(), WAIT) == source.id
