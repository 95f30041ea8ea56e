"""The turn-end and drain decisions as pure functions (``engine/turn_end.py``, and the drain's
in ``engine/turns.py``): no database, no engine, no event loop. Each test names the rule it
proves."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

import pytest

from turnqueue.agents import AgentResult
from turnqueue.domain import Clarification, QueuePolicy, Session, SessionState, TurnStatus
from turnqueue.engine.turn_end import TurnEnd, decide_end, given_up, view_after_end, with_move
from turnqueue.engine.turns import DrainResult, drain_decision, view_holds
from turnqueue.store import SessionView

NOW = datetime(2026, 1, 1, tzinfo=UTC)
OK = AgentResult(ok=True)
ASKS = AgentResult(ok=True, clarification="which one?")
FAILS = AgentResult(ok=False, error="agent error: boom")


def session(state: SessionState = SessionState.WAITING_FOR_INPUT, revision: int = 3) -> Session:
    return Session("s1", "t1", "alice", "scripted", state, revision, NOW, NOW)


def view(
    *,
    state: SessionState = SessionState.WAITING_FOR_INPUT,
    queued: int = 1,
    auto_run: bool = True,
    running: str | None = None,
    clarification: bool = False,
) -> SessionView:
    question = Clarification("c1", "s1", "t0", "?", NOW) if clarification else None
    policy = QueuePolicy("s1", auto_run, None, 7)
    return SessionView(session(state), policy, question, queued, running)


# -- C8: pending wins ------------------------------------------------------------------------
@pytest.mark.parametrize("result", [OK, ASKS, FAILS], ids=["completed", "asked", "failed"])
def test_c8_a_pending_cancellation_wins_over_any_outcome(result: AgentResult) -> None:
    """C8: whatever the agent said, a turn that ends while a cancellation is pending is
    CANCELLED, keeps no question, and its end drains nothing."""
    end = decide_end(result, pending=True)
    assert (end.status, end.question, end.pending, end.drains) == (
        TurnStatus.CANCELLED,
        None,
        True,
        False,
    )
    assert end.error == (result.error or "cancelled")
    assert not end.asks_workflow  # W2 decides a cancel's move, not W1


def test_c8_without_pending_the_agents_outcome_stands() -> None:
    """C8 (converse): with nothing pending, the agent's outcome is recorded as it is."""
    assert decide_end(OK, pending=False) == TurnEnd(TurnStatus.COMPLETED, None, None, False)
    failed = decide_end(FAILS, pending=False)
    assert (failed.status, failed.error) == (TurnStatus.FAILED, "agent error: boom")
    assert decide_end(AgentResult(ok=False), pending=False).error == "cancelled"


# -- Q4, Q9: a question, the drain -------------------------------------------------------------
def test_q9_a_completed_turns_question_is_kept_and_asks_no_workflow() -> None:
    """Q9, W1: a completion with a question becomes the clarification (which holds the queue);
    it does not move the task on, so the workflow guard is not read."""
    end = decide_end(ASKS, pending=False)
    assert (end.status, end.question, end.error) == (TurnStatus.COMPLETED, "which one?", None)
    assert not end.asks_workflow
    assert with_move(end, True) == end  # a guard's answer changes nothing here


def test_q9_a_failed_turn_keeps_no_question() -> None:
    """Q9: only a completion asks; a failed turn's question is dropped (nothing holds)."""
    end = decide_end(AgentResult(ok=False, error="x", clarification="?"), pending=False)
    assert end.question is None and end.drains


def test_q4_a_plain_completion_drains_in_its_own_end() -> None:
    """Q4: a completed turn whose task does not move drains the next entry in its end."""
    end = with_move(decide_end(OK, pending=False), False)
    assert end.drains and not end.moving and not end.unchecked


# -- W1, Q9: the workflow guard ----------------------------------------------------------------
def test_w1_a_completion_that_moves_the_task_drains_after_the_move() -> None:
    """W1: when the step moves the task on completion, the end does not drain: the drain runs
    once the step change has committed."""
    end = with_move(decide_end(OK, pending=False), True)
    assert end.asks_workflow and end.moving and not end.drains


def test_q9_an_unreadable_workflow_guard_holds_the_queue() -> None:
    """Q9: a guard that cannot be read (None) holds: the end is recorded COMPLETED, the task
    does not move, and nothing drains."""
    end = with_move(decide_end(OK, pending=False), None)
    assert (end.status, end.moving, end.unchecked, end.drains) == (
        TurnStatus.COMPLETED,
        False,
        True,
        False,
    )


def test_w1_an_end_given_up_at_shutdown_moves_nothing() -> None:
    """M6, W1: an end that cannot commit at shutdown is reported FAILED and moves no task."""
    end = given_up(with_move(decide_end(OK, pending=False), True))
    assert (end.status, end.moving) == (TurnStatus.FAILED, False)


# -- Q4: the view the end's drain decides on -------------------------------------------------
def test_q4_the_view_after_an_end_is_derived_when_the_lock_saw_the_turn() -> None:
    """Q4: when the locked view saw this turn running, the drain decides on that view with the
    ended session and no running turn; otherwise (or with a new question) it is read again."""
    before = view(state=SessionState.RUNNING, running="turn1")
    ended = session(SessionState.WAITING_FOR_INPUT, revision=4)
    after = view_after_end(before, ended, "turn1", None)
    assert after == replace(before, session=ended, running_turn_id=None, running_turn_owner=None)
    assert view_after_end(before, ended, "turn1", "which one?") is None
    assert view_after_end(before, ended, "other", None) is None


# -- Q3, Q6, Q9: the drain decision ------------------------------------------------------------
def test_q3_an_automatic_drain_obeys_auto_run_and_tells_paused_from_empty() -> None:
    """Q3: OFF pauses an automatic drain; an empty queue is EMPTY whatever the policy."""
    assert drain_decision(view(auto_run=False), automatic=True, held=False) is DrainResult.PAUSED
    assert drain_decision(view(queued=0), automatic=True, held=False) is DrainResult.EMPTY
    assert (
        drain_decision(view(queued=0, auto_run=False), automatic=True, held=False)
        is DrainResult.EMPTY
    )
    assert drain_decision(view(), automatic=True, held=False) is None  # reserve the head


def test_q6_a_targeted_drain_does_not_read_auto_run() -> None:
    """Q6: a targeted start of the head ignores auto-run (it still obeys the holds)."""
    assert drain_decision(view(auto_run=False), automatic=False, held=False) is None
    assert drain_decision(view(auto_run=False), automatic=False, held=True) is DrainResult.HELD


def test_q9_holds_come_before_anything_else() -> None:
    """Q9: a held queue is HELD, even when it is empty or paused."""
    for v in (view(), view(queued=0), view(auto_run=False)):
        assert drain_decision(v, automatic=True, held=True) is DrainResult.HELD


@pytest.mark.parametrize(
    ("locked", "holds"),
    [
        (view(), False),
        (view(state=SessionState.COMPLETED), False),
        (view(state=SessionState.RUNNING), True),
        (view(state=SessionState.STARTING), True),
        (view(state=SessionState.FAILED), True),
        (view(clarification=True), True),
        (view(running="turn1"), True),
    ],
    ids=["waiting", "completed", "running", "starting", "failed", "clarification", "turn"],
)
def test_q9_the_locked_view_holds_when_not_promptable_asked_or_running(
    locked: SessionView, holds: bool
) -> None:
    """Q9: from the locked view alone, a session holds its queue when it is not promptable, has
    a pending clarification or a running turn (the lock row may see one started elsewhere)."""
    assert view_holds(locked) is holds
