"""Workflow rules W1–W3 (and Q14's TRANSFER reason, Q13 across a transfer)."""

from __future__ import annotations

from pathlib import Path

import pytest
from engine_helpers import PRINCIPAL, ManualAgent, new_session, settle

from turnqueue.domain import PauseReason, SendNowScope, SessionState, TurnStatus
from turnqueue.engine import Engine
from turnqueue.engine.workflow import load_workflow
from turnqueue.errors import ErrorCode, UserFacingError
from turnqueue.settings import Settings

WORKFLOW = """
[[steps]]
name = "PLAN"
on_turn_complete = "MOVE_TO_NEXT"
cancel_triggers_turn_complete = true

[[steps]]
name = "BUILD"
new_session_on_enter = true

[[steps]]
name = "DONE"
"""


@pytest.fixture
async def flow(tmp_path: Path, engine_settings: Settings, open_engine) -> Engine:  # type: ignore[no-untyped-def]
    path = tmp_path / "workflow.toml"
    path.write_text(WORKFLOW)
    return await open_engine(engine_settings.model_copy(update={"workflow_file": path}))  # type: ignore[no-any-return]


def test_default_workflow_has_three_steps_with_every_action_off() -> None:
    workflow = load_workflow(None)
    assert [s.name for s in workflow.steps] == ["IN_PROGRESS", "REVIEW", "DONE"]
    assert not any(
        s.new_session_on_enter or s.cancel_triggers_turn_complete for s in workflow.steps
    )


def test_a_workflow_file_with_unknown_keys_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "w.toml"
    path.write_text('[[steps]]\nname = "A"\nsurprise = 1\n')
    with pytest.raises(ValueError, match="unknown step keys"):
        load_workflow(path)


async def test_w1_completion_moves_the_task_then_drains_once_on_the_new_session(
    flow: Engine, agent: ManualAgent
) -> None:
    task, session = await new_session(flow)
    await flow.send_message(PRINCIPAL, session.id, "plan it")
    run = await agent.next_run()
    await flow.enqueue(PRINCIPAL, session.id, "b1", None)
    await flow.enqueue(PRINCIPAL, session.id, "b2", None)
    run.complete()
    successor = await agent.next_run()  # one drain, on the transferred queue
    moved = await flow.task(PRINCIPAL, task.id)
    assert moved is not None and moved.workflow_step == "BUILD"
    assert moved.current_session_id != session.id
    assert successor.session_id == moved.current_session_id and successor.prompt == "b1"
    await settle(flow, moved.current_session_id)
    assert agent.no_new_run()
    old = await flow.session(PRINCIPAL, session.id)
    assert old is not None and old.state is SessionState.COMPLETED


async def test_w2_cancel_runs_the_turn_complete_action_when_the_step_says_so(
    flow: Engine, agent: ManualAgent
) -> None:
    task, session = await new_session(flow)
    await flow.send_message(PRINCIPAL, session.id, "plan it")
    await agent.next_run()
    await flow.cancel(PRINCIPAL, session.id)
    moved = await flow.task(PRINCIPAL, task.id)
    assert moved is not None and moved.workflow_step == "BUILD"


async def test_w2_send_now_replacement_never_runs_the_turn_complete_action(
    flow: Engine, agent: ManualAgent
) -> None:
    task, session = await new_session(flow)
    await flow.send_message(PRINCIPAL, session.id, "plan it")
    await agent.next_run()
    entry, _, _ = await flow.enqueue(PRINCIPAL, session.id, "instead", None)
    await flow.send_now(PRINCIPAL, session.id, SendNowScope.ENTRY, entry.id, None)
    still = await flow.task(PRINCIPAL, task.id)
    assert still is not None and still.workflow_step == "PLAN"
    assert (await flow.turns_of(session.id, 2))[0].status is TurnStatus.CANCELLED


async def test_w2_cancel_on_a_step_without_the_flag_does_not_move(
    engine: Engine, agent: ManualAgent
) -> None:
    task, session = await new_session(engine)
    await engine.send_message(PRINCIPAL, session.id, "work")
    await agent.next_run()
    await engine.cancel(PRINCIPAL, session.id)
    still = await engine.task(PRINCIPAL, task.id)
    assert still is not None and still.workflow_step == "IN_PROGRESS"


async def test_w3_transfer_moves_entries_in_order_and_ands_the_policy(
    flow: Engine, agent: ManualAgent
) -> None:
    task, source = await new_session(flow)
    await flow.set_auto_run(PRINCIPAL, source.id, False, None)
    for content in ("a", "b", "c"):
        await flow.enqueue(PRINCIPAL, source.id, content, None)
    source_revision = (await flow.queue_status(source.id)).revision
    moved, destination = await flow.move_task(PRINCIPAL, task.id, "BUILD")
    assert moved.workflow_step == "BUILD" and destination.id != source.id
    status = await flow.queue_status(destination.id)
    assert [e.content for e in status.entries] == ["a", "b", "c"]
    assert status.auto_run is False and status.pause_reason is PauseReason.TRANSFER  # Q14
    assert agent.no_new_run()
    old = await flow.queue_status(source.id)
    assert old.entries == () and old.auto_run is True  # the policy row is gone
    assert old.revision > source_revision  # Q13: never goes back
    old_session = await flow.session(PRINCIPAL, source.id)
    assert old_session is not None and old_session.state is SessionState.COMPLETED


async def test_w3_transfer_of_a_running_queue_keeps_it_running(
    flow: Engine, agent: ManualAgent
) -> None:
    task, source = await new_session(flow)
    await flow.set_auto_run(PRINCIPAL, source.id, False, None)
    await flow.enqueue(PRINCIPAL, source.id, "a", None)
    await flow.set_auto_run(PRINCIPAL, source.id, True, None)  # starts "a"
    running = await agent.next_run()
    await flow.enqueue(PRINCIPAL, source.id, "b", None)
    _, destination = await flow.move_task(PRINCIPAL, task.id, "BUILD")
    assert running.signals  # the source's turn was stopped (internal cancel)
    nxt = await agent.next_run()
    assert nxt.session_id == destination.id and nxt.prompt == "b"
    assert (await flow.queue_status(destination.id)).auto_run is True


async def test_moving_to_an_unknown_step_is_invalid_input(engine: Engine) -> None:
    task, _ = await new_session(engine)
    with pytest.raises(UserFacingError) as info:
        await engine.move_task(PRINCIPAL, task.id, "NOWHERE")
    assert info.value.code is ErrorCode.INVALID_INPUT


async def _state(engine: Engine, session_id: str) -> SessionState:
    async with engine.core.store.read() as tx:
        session = await tx.get_session(session_id)
    assert session is not None
    return session.state


async def _turn_ends_after_moves(engine: Engine, agent: ManualAgent, *steps: str) -> str:
    """A session whose task moves through ``steps`` while its turn runs; returns once that
    turn has ended."""
    task, session = await new_session(engine)
    await engine.send_message(PRINCIPAL, session.id, "work")
    run = await agent.next_run()
    for step in steps:
        _, current = await engine.move_task(PRINCIPAL, task.id, step)
        assert current.state is SessionState.RUNNING  # the turn is not touched
    run.complete()
    await settle(engine, session.id)
    return session.id


async def test_reaching_the_last_step_while_a_turn_runs_completes_the_session_when_it_ends(
    engine: Engine, agent: ManualAgent
) -> None:
    """SPEC §2 COMPLETED ("its task reached the workflow's last step"): moved there while a turn
    runs, the session completes when that turn ends; a prompt then reopens it, and the end of
    that turn leaves it WAITING_FOR_INPUT."""
    session_id = await _turn_ends_after_moves(engine, agent, "DONE")
    assert await _state(engine, session_id) is SessionState.COMPLETED

    await engine.send_message(PRINCIPAL, session_id, "one more thing")  # reopens it
    (await agent.next_run()).complete()
    await settle(engine, session_id)
    assert await _state(engine, session_id) is SessionState.WAITING_FOR_INPUT


async def test_leaving_the_last_step_before_the_turn_ends_takes_the_completion_back(
    engine: Engine, agent: ManualAgent
) -> None:
    session_id = await _turn_ends_after_moves(engine, agent, "DONE", "REVIEW")
    assert await _state(engine, session_id) is SessionState.WAITING_FOR_INPUT


async def test_reaching_the_last_step_completes_the_session_and_a_prompt_reopens_it(
    engine: Engine, agent: ManualAgent
) -> None:
    task, session = await new_session(engine)
    _, current = await engine.move_task(PRINCIPAL, task.id, "DONE")
    assert current.id == session.id and current.state is SessionState.COMPLETED
    admission = await engine.send_message(PRINCIPAL, session.id, "one more thing")
    assert admission.turn is not None
    assert (await agent.next_run()).prompt == "one more thing"
