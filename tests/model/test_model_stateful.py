"""Model-based test: the real engine and the reference model (``queue_model``) run the same random
operations and must agree after every step, on SQLite and PostgreSQL (M3).

Operations: enqueue, sendMessage, edit, remove, clear, reorder, setAutoRun on/off, sendNow
(ENTRY and ALL), drain, cancel, the agent completing / failing / asking a clarification,
answerClarification, moving the task (a ``new_session_on_enter`` step transfers the queue, W3;
the last step completes the session), and a restart (a crash recovered by M6, or a graceful
close) with a new agent on the same database. Mutations randomly carry a current or a stale
``expectedRevision`` (Q13) and target visible, vanished or unknown entries.

After every step the engine's observable state must equal the model's — every session's queue
entries (ids, contents, order), autoRun, pauseReason, heldBy, state, clarification, its turns
(prompts and statuses, oldest first) and which turn runs — and these invariants must hold:

- Q10: every content the test created (and did not remove) is exactly once in the queues and the
  turns' prompts; nothing appears that the test never created;
- Q13/R1/R2: queue and session revisions never go back, and the queue revision moves whenever the
  queue status changed; cancellation revisions never go back (a process that knows nothing of a
  session answers 0, C7, and never outranks a real transition);
- C1/C5: ``cancellationPending`` is false whenever no cancellation is under way.

Each example gets a fresh database (a copy of a migrated SQLite file; a PostgreSQL database
cloned from the migrated template). ``TURNQUEUE_MODEL_EXAMPLES`` raises the number of examples.
The engine runs on one ``asyncio.Runner`` per example, created and closed by the machine itself,
so the test is a plain (sync) test and pytest-asyncio's loop is not involved.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import sys
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from queue_model import Admitted, ModelSession, ModelStep, ModelTurn, Refused, TaskModel
from sqlalchemy.engine import make_url

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "engine"))
from engine_helpers import PRINCIPAL, ManualAgent, next_event, settle
from engine_probes import clarification, pending_approval
from faults import FaultyStore
from model_db import admin as _admin
from model_db import pg_url as _pg_url

from turnqueue.agents.acp_run import PermissionRequest
from turnqueue.bus import EventBus, EventKind
from turnqueue.domain import ApprovalOutcome, CancelOutcome, HoldReason, SendNowScope, TurnStatus
from turnqueue.engine import Engine
from turnqueue.errors import ErrorCode, UserFacingError
from turnqueue.settings import Settings
from turnqueue.store.migrate import migrate
from turnqueue.store.sql import SqlStore, open_store
from turnqueue.timeouts import within

T = TypeVar("T")

EXAMPLES = int(os.environ.get("TURNQUEUE_MODEL_EXAMPLES", "25"))
STEPS = int(os.environ.get("TURNQUEUE_MODEL_STEPS", "25"))
QUEUE_MAX = 4

WORKFLOW = """
[[steps]]
name = "WORK"

[[steps]]
name = "PLAN"
on_turn_complete = "MOVE_TO_NEXT"
cancel_triggers_turn_complete = true

[[steps]]
name = "HANDOFF"
new_session_on_enter = true

[[steps]]
name = "FINISH"
"""
STEPS_OF_MODEL = [
    ModelStep("WORK"),
    ModelStep("PLAN", move_on_complete=True, cancel_completes=True),
    ModelStep("HANDOFF", new_session_on_enter=True),
    ModelStep("FINISH"),
]

#: what every run of this module did, printed at the end (figures for the README)
TALLY: Counter[str] = Counter()


# -- fresh databases, one per example ----------------------------------------------------------
class Databases:
    """Hands out a fresh migrated database per example and drops it afterwards."""

    def __init__(self, kind: str, tmp: Path, pg: tuple[str, str] | None) -> None:
        self.kind = kind
        self.tmp = tmp
        self.pg = pg
        self.template_file = tmp / "template.db"

    def prepare(self) -> None:
        if self.kind == "sqlite":
            asyncio.run(migrate(f"sqlite:///{self.template_file}"))

    async def create(self) -> str:
        if self.kind == "sqlite":
            path = self.tmp / f"m_{uuid.uuid4().hex[:12]}.db"
            shutil.copyfile(self.template_file, path)
            return f"sqlite:///{path}"
        assert self.pg is not None
        base, template = self.pg
        name = f"tq_model_{uuid.uuid4().hex[:12]}"
        await _admin(base, f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
        return _pg_url(base, name)

    async def drop(self, url: str) -> None:
        if self.kind == "sqlite":
            _unlink_sqlite(url)
            return
        assert self.pg is not None
        name = make_url(url).database
        await _admin(self.pg[0], f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _unlink_sqlite(url: str) -> None:
    path = url.removeprefix("sqlite:///")
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)


@pytest.fixture(params=["sqlite", "postgresql"])
def databases(request: pytest.FixtureRequest, tmp_path: Path) -> Databases:
    pg = request.getfixturevalue("pg_template") if request.param == "postgresql" else None
    dbs = Databases(request.param, tmp_path, pg)
    dbs.prepare()
    return dbs


# -- the machine -------------------------------------------------------------------------------
CONTENT_KINDS = st.sampled_from(["plain", "plain", "plain", "stubborn", "multibyte"])
REVISIONS = st.sampled_from([None, None, None, "current", "stale"])
TARGETS = st.sampled_from(["visible", "visible", "visible", "gone", "unknown"])


def _running(machine: EngineMachine) -> bool:
    return machine.model.current.running is not None


class EngineMachine(RuleBasedStateMachine):
    """One task on a fresh database; operations go to its current session."""

    dbs: Databases  # set by the test before the run
    tmp: Path

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.Runner()
        self.counter = 0
        self.ledger: Counter[str] = Counter()  # contents created and not removed
        self.seen_ids: list[str] = []
        self.queue_revisions: dict[str, int] = {}
        self.session_revisions: dict[str, int] = {}
        self.cancel_revisions: dict[str, int] = {}
        self.fresh_process: set[str] = set()  # sessions this process has said nothing about
        self.statuses: dict[str, tuple[object, ...]] = {}
        self.visible: dict[str, str] = {}  # entry id -> content, as the engine last showed
        #: A6: the agent's waiting permission requests (asks), and every turn that asked one
        self.asking: list[asyncio.Task[str | None]] = []
        self.approval_turns: set[str] = set()
        self.engine: Engine | None = None
        self.store: FaultyStore | None = None
        self.url = self.run(self.dbs.create())
        workflow = self.tmp / "workflow.toml"
        if not workflow.exists():
            workflow.write_text(WORKFLOW)
        self.settings = Settings(
            database_url=self.url,
            cancel_timeout=0.2,
            escalation_timeout=2.0,
            cancel_operation_timeout=10,
            queue_max=QUEUE_MAX,
            workflow_file=workflow,
        )
        self.run(self._open())
        task, session = self.run(self.engine_.create_task(PRINCIPAL, "model", None))
        self.task_id = task.id
        self.model = TaskModel(session.id, STEPS_OF_MODEL, QUEUE_MAX)
        TALLY["examples"] += 1

    # -- plumbing -------------------------------------------------------------------------------
    def run(self, coro: Awaitable[T]) -> T:
        async def wrapped() -> T:
            return await within(coro, 60)

        return self.loop.run(wrapped())

    @property
    def engine_(self) -> Engine:
        assert self.engine is not None
        return self.engine

    @property
    def agent(self) -> ManualAgent:
        agent = self.engine_.core.agents["scripted"]
        assert isinstance(agent, ManualAgent)
        return agent

    @property
    def sid(self) -> str:
        return self.model.current.id

    async def _open(self) -> None:
        self.store = FaultyStore(await open_store(self.settings))
        agents: Any = {"scripted": ManualAgent()}
        seam: Any = self.store  # a Store, by delegation
        self.engine = await Engine.open(self.settings, seam, EventBus(256), agents=agents)

    async def _close(self, crash: bool) -> None:
        engine, store = self.engine_, self.store
        assert store is not None
        if crash:
            # The process dies: its runtime forgets everything, the database keeps the RUNNING
            # turn. On PostgreSQL its instance row goes too, as when its lease expires (M4).
            engine.core.closing = True
            engine.core.runners.clear()
            if engine.core.cluster is not None:
                await engine.core.cluster.aclose()
            agent = self.agent
            await self._open()  # recovery (M6) runs here
            for run in agent.runs:  # let the dead process's leftovers end quietly
                run.fail("process died")
            # M6: recovery itself settled the dead turn's approvals (before the dead agent's
            # waits end below, which would settle them too).
            for sid in {s.id for s in self.model.sessions}:
                await self._approvals_settled(self.engine_, sid)
            await self._drop_asks()
            await engine.aclose()
            await store.close()
        else:
            await engine.aclose()
            await self._drop_asks()  # the shutdown stopped the turn: its waits end
            await store.close()
            await self._open()
        self.fresh_process = {s.id for s in self.model.sessions}

    def teardown(self) -> None:
        try:
            if self.engine is not None:
                self.run(self.engine.aclose())
            if self.store is not None:
                self.run(self.store.close())
            self.run(self.dbs.drop(self.url))
        finally:
            self.loop.close()

    async def _approvals_settled(self, engine: Engine, sid: str) -> None:
        for turn in await engine.turns_of(sid, 200):
            if turn.id in self.approval_turns and turn.status is not TurnStatus.RUNNING:
                outcomes = [a.outcome for a in await engine.approvals_of_turn(turn.id)]
                assert ApprovalOutcome.PENDING not in outcomes, f"{turn.id[:8]}: {outcomes}"

    async def _drop_asks(self, keep: str | None = None) -> None:
        """The agent gives up every wait but the running turn ``keep``'s (A5: a turn that ends
        answers its pending permission requests ``cancelled``)."""
        for task in list(self.asking):
            if keep is not None and getattr(task, "turn_id", None) == keep:
                continue
            self.asking.remove(task)
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def content(self, kind: str) -> str:
        self.counter += 1
        if kind == "stubborn":
            return f"/stubborn m{self.counter}"
        if kind == "multibyte":  # astral, CJK and combining characters (O1, M4)
            return f"m{self.counter} 😀🧪 日本語 é"
        return f"m{self.counter}"

    async def expected(self, choice: str | None) -> tuple[int | None, bool]:
        """An ``expectedRevision`` (Q13) and whether it is stale."""
        if choice is None:
            return None, False
        current = (await self.engine_.queue_status(self.sid)).revision
        return (current, False) if choice == "current" else (current - 1, True)

    def entry_id(self, target: str, index: int) -> str:
        entries = self.model.current.entries
        if target == "visible" and entries:
            return entries[index % len(entries)].id
        if target != "unknown" and self.seen_ids:
            gone = [i for i in self.seen_ids if self.model.current.entry(i) is None]
            if gone:
                return gone[index % len(gone)]
        return str(uuid.uuid4())

    def apply(
        self,
        name: str,
        call: Callable[[], Awaitable[T]],
        model_op: Callable[[T | None], Any],
    ) -> tuple[T | None, Any]:
        """Run ``call`` on the engine and ``model_op`` on the model; they must agree on whether
        the operation is refused, and with which code."""

        async def attempt() -> tuple[T | None, ErrorCode | None]:
            try:
                result = await call()
            except UserFacingError as error:
                return None, error.code
            await settle(self.engine_, self.sid)
            return result, None

        result, code = self.run(attempt())
        try:
            outcome = model_op(result)
        except Refused as refused:
            assert code is not None, (
                f"{name}: model refuses with {set(refused.codes)}, engine did it"
            )
            assert code in refused.codes, f"{name}: engine says {code}, model {set(refused.codes)}"
            TALLY[f"{name}:{code}"] += 1
            TALLY["operations"] += 1
            return None, None
        assert code is None, f"{name}: engine refused with {code}, the model accepts"
        TALLY[f"{name}:ok"] += 1
        TALLY["operations"] += 1
        return result, outcome

    @staticmethod
    def same_start(name: str, engine_prompt: str | None, model_turn: ModelTurn | None) -> None:
        expected = model_turn.prompt if model_turn is not None else None
        assert engine_prompt == expected, (
            f"{name}: engine started {engine_prompt!r}, model {expected!r}"
        )

    # -- client operations (Q2–Q13) -------------------------------------------------------------
    @rule(kind=CONTENT_KINDS, rev=REVISIONS)
    def enqueue(self, kind: str, rev: str | None) -> None:
        content = self.content(kind)
        expected, stale = self.run(self.expected(rev))
        result, started = self.apply(
            "enqueue",
            lambda: self.engine_.enqueue(PRINCIPAL, self.sid, content, expected),
            lambda r: self.model.enqueue(r[0].id if r else "?", content, stale),
        )
        if result is not None:
            self.ledger[content] += 1
            self.seen_ids.append(result[0].id)
            self.same_start("enqueue", result[1].prompt if result[1] else None, started)

    @rule(kind=CONTENT_KINDS)
    def send_message(self, kind: str) -> None:
        content = self.content(kind)
        result, admitted = self.apply(
            "sendMessage",
            lambda: self.engine_.send_message(PRINCIPAL, self.sid, content),
            lambda r: self.model.send_message(r.entry.id if r and r.entry else "?", content),
        )
        if result is not None:
            self.ledger[content] += 1
            engine_admitted = Admitted.TURN if result.turn is not None else Admitted.QUEUED
            assert engine_admitted is admitted, (
                f"sendMessage: engine {engine_admitted}, model {admitted}"
            )
            if result.entry is not None:
                self.seen_ids.append(result.entry.id)

    @rule(which=TARGETS, index=st.integers(0, 9), rev=REVISIONS)
    def edit(self, which: str, index: int, rev: str | None) -> None:
        entry_id = self.entry_id(which, index)
        self.counter += 1
        content = f"m{self.counter}"
        expected, stale = self.run(self.expected(rev))
        old = self.visible.get(entry_id)
        result, _ = self.apply(
            "updateQueueEntry",
            lambda: self.engine_.update_entry(PRINCIPAL, self.sid, entry_id, content, expected),
            lambda _r: self.model.update_entry(entry_id, content, stale),
        )
        if result is not None:
            assert old is not None, "an entry the engine did not show was edited"
            self.ledger[old] -= 1
            self.ledger[content] += 1

    @rule(which=TARGETS, index=st.integers(0, 9), rev=REVISIONS)
    def remove(self, which: str, index: int, rev: str | None) -> None:
        entry_id = self.entry_id(which, index)
        expected, stale = self.run(self.expected(rev))
        old = self.visible.get(entry_id)
        result, _ = self.apply(
            "removeQueueEntry",
            lambda: self.engine_.remove_entry(PRINCIPAL, self.sid, entry_id, expected),
            lambda _r: self.model.remove_entry(entry_id, stale),
        )
        if result is not None:
            assert old is not None, "an entry the engine did not show was removed"
            self.ledger[old] -= 1

    @rule(rev=REVISIONS)
    def clear(self, rev: str | None) -> None:
        expected, stale = self.run(self.expected(rev))
        before = dict(self.visible)
        result, _ = self.apply(
            "clearQueue",
            lambda: self.engine_.clear_queue(PRINCIPAL, self.sid, expected),
            lambda _r: self.model.clear(stale),
        )
        if result is not None:
            for content in before.values():
                self.ledger[content] -= 1

    @rule(data=st.data(), mangle=st.sampled_from(["none", "none", "none", "drop", "add"]))
    def reorder(self, data: st.DataObject, mangle: str) -> None:
        ids = [e.id for e in self.model.current.entries]
        ordered = data.draw(st.permutations(ids)) if ids else []
        if mangle == "drop" and ordered:
            ordered = ordered[1:]
        elif mangle == "add":
            ordered = [*ordered, str(uuid.uuid4())]
        rev = data.draw(REVISIONS)
        expected, stale = self.run(self.expected(rev))
        self.apply(
            "reorderQueue",
            lambda: self.engine_.reorder_queue(PRINCIPAL, self.sid, ordered, expected),
            lambda _r: self.model.reorder(ordered, stale),
        )

    @rule(on=st.booleans(), rev=REVISIONS)
    def set_auto_run(self, on: bool, rev: str | None) -> None:
        expected, stale = self.run(self.expected(rev))
        result, started = self.apply(
            "setAutoRun",
            lambda: self.engine_.set_auto_run(PRINCIPAL, self.sid, on, expected),
            lambda _r: self.model.set_auto_run(on, stale),
        )
        turn = result.turn if result is not None else None
        if started is not None or turn is not None:
            self.same_start("setAutoRun", turn.prompt if turn else None, started)

    @rule(which=TARGETS, index=st.integers(0, 9), rev=REVISIONS, whole=st.booleans())
    def send_now(self, which: str, index: int, rev: str | None, whole: bool) -> None:
        """Q5: ENTRY (or, for compatibility, ALL) in place of the active turn."""
        entry_id = None if whole else self.entry_id(which, index)
        scope = SendNowScope.ALL if whole else SendNowScope.ENTRY
        expected, stale = self.run(self.expected(rev))
        result, started = self.apply(
            f"sendNow{scope.value}",
            lambda: self.engine_.send_now(PRINCIPAL, self.sid, scope, entry_id, expected),
            lambda _r: self.model.send_now(entry_id, stale),
        )
        if result is not None:
            assert result.sent_count == len(started.prompt.split("\n\n"))
            self.same_start("sendNow", result.turn.prompt if result.turn else None, started)

    @rule(rev=REVISIONS)
    def drain(self, rev: str | None) -> None:
        expected, stale = self.run(self.expected(rev))
        result, started = self.apply(
            "drain",
            lambda: self.engine_.drain(PRINCIPAL, self.sid, expected),
            lambda _r: self.model.drain(stale),
        )
        self.same_start("drain", result.turn.prompt if result and result.turn else None, started)

    @rule()
    def cancel(self) -> None:
        """Q7, C3–C5, C8, C9, W2."""

        async def go() -> tuple[Any, str | None]:
            result = await self.engine_.cancel(PRINCIPAL, self.sid)
            task = await self.engine_.task(PRINCIPAL, self.task_id)
            assert task is not None and task.current_session_id is not None
            await settle(self.engine_, task.current_session_id)  # after a W2 transfer
            return result, task.current_session_id

        before = self.sid
        both, was_running = self.apply(
            "cancel", go, lambda r: self.model.cancel(r[1] if r else None)
        )
        assert both is not None
        result = both[0]
        if self.sid != before:
            TALLY["W2:moved+transferred"] += 1
        if was_running:
            assert result.outcome in (CancelOutcome.STOPPED, CancelOutcome.ESCALATED), result
        else:
            assert result.outcome is CancelOutcome.NOTHING_RUNNING, result
        assert result.cancellation.pending is False  # C5: the answer comes once it has finished

    @rule(wrong=st.booleans(), kind=CONTENT_KINDS)
    def answer(self, wrong: bool, kind: str) -> None:
        content = self.content(kind)
        asked = self.run(clarification(self.engine_, self.sid))
        cid = str(uuid.uuid4()) if wrong or asked is None else asked.id
        result, _ = self.apply(
            "answerClarification",
            lambda: self.engine_.answer_clarification(PRINCIPAL, self.sid, content, cid),
            lambda _r: self.model.answer(content, wrong),
        )
        if result is not None:
            self.ledger[content] += 1

    # -- the agent ------------------------------------------------------------------------------
    def _end_turn(self, name: str, end: Callable[[Any], None]) -> str:
        """End the running turn; answers the task's current session afterwards."""

        async def go() -> str:
            runner = self.engine_.core.runners[self.sid]
            run = await self.agent.run_for(runner.turn.id)
            end(run)
            # The runner's task also runs a W1 move (and its transfer) after the end.
            assert runner.task is not None
            await within(asyncio.shield(runner.task), 30)
            task = await self.engine_.task(PRINCIPAL, self.task_id)
            assert task is not None and task.current_session_id is not None
            await settle(self.engine_, task.current_session_id)
            return task.current_session_id

        before = self.sid
        current = self.run(go())
        TALLY["W1:moved+transferred" if current != before else f"{name}:ok"] += 1
        TALLY["operations"] += 1
        return current

    @precondition(_running)
    @rule()
    def complete(self) -> None:
        current = self._end_turn("agent.complete", lambda run: run.complete())
        self.model.complete(None, current)

    @precondition(_running)
    @rule()
    def fail(self) -> None:
        self._end_turn("agent.fail", lambda run: run.fail())
        self.model.fail()

    @precondition(_running)
    @rule(failures=st.integers(1, 3))
    def complete_after_failed_commits(self, failures: int) -> None:
        """Q10, M6: the end's first ``failures`` commits fail (the database is away); it is
        retried until it commits, so the outcome is that of a plain completion."""
        assert self.store is not None
        with self.store.failing("end_turn", failures) as left:
            current = self._end_turn("agent.complete(retried)", lambda run: run.complete())
        assert left() == 0, "the end was not retried"
        self.model.complete(None, current)

    @precondition(lambda self: self.model.current.running is None)
    @rule(kind=CONTENT_KINDS)
    def send_message_agent_cannot_start(self, kind: str) -> None:
        """C5, Q4: the agent of a directly started turn fails to start: the turn fails, no
        reference sticks, and the queue runs on as after any failed turn."""
        content = self.content(kind)
        self.agent.fail_starts = 1

        def model_op(r: Any) -> Admitted:
            admitted = self.model.send_message(r.entry.id if r and r.entry else "?", content)
            if admitted is Admitted.TURN:
                self.model.fail(error="agent error: cannot start")
            return admitted

        try:
            result, admitted = self.apply(
                "sendMessage(start fails)",
                lambda: self.engine_.send_message(PRINCIPAL, self.sid, content),
                model_op,
            )
        finally:
            self.agent.fail_starts = 0
        if result is not None:
            self.ledger[content] += 1
            if result.entry is not None:
                self.seen_ids.append(result.entry.id)
            assert (result.turn is not None) is (admitted is Admitted.TURN)

    @precondition(_running)
    @rule()
    def ask(self) -> None:
        self.counter += 1
        question = f"q{self.counter}?"
        current = self._end_turn("agent.ask", lambda run: run.complete(clarification=question))
        self.model.complete(question, current)

    @precondition(lambda self: _running(self) and not self.model.current.approval)
    @rule()
    def request_approval(self) -> None:
        """A6: the running turn's agent asks for a permission: the queue is held (APPROVAL)
        until it is answered or the turn ends; a crash meanwhile is settled by recovery (M6)."""
        sid = self.sid

        async def go() -> None:
            engine = self.engine_
            turn_id = engine.core.runners[sid].turn.id
            options = (("yes", "Allow", "allow_once"), ("no", "Reject", "reject_once"))
            request = PermissionRequest(sid, turn_id, "Run it", "call-1", options)
            with engine.bus.subscribe(sid, [EventKind.QUEUE]) as sub:
                task = asyncio.ensure_future(engine.approvals.ask(request))
                task.turn_id = turn_id  # type: ignore[attr-defined]
                self.asking.append(task)
                while HoldReason.APPROVAL not in (await engine.queue_status(sid)).held_by:
                    await next_event(sub, EventKind.QUEUE)
            self.approval_turns.add(turn_id)

        self.run(go())
        self.model.current.approval = True
        TALLY["approval:asked"] += 1
        TALLY["operations"] += 1

    @precondition(lambda self: self.model.current.approval)
    @rule(option=st.sampled_from(["yes", "no"]))
    def answer_approval(self, option: str) -> None:
        """A6: the pending approval is answered once; the agent goes on, the hold ends."""

        async def go() -> None:
            approval = await pending_approval(self.engine_, self.sid)
            assert approval is not None, "the approval the model waits for is not pending"
            await self.engine_.answer_approval(PRINCIPAL, approval.id, option)
            await self._drop_asks()  # answered: the waits end

        self.run(go())
        self.model.current.approval = False
        TALLY["approval:answered"] += 1
        TALLY["operations"] += 1

    @precondition(lambda self: _running(self) and not self.model._step().cancel_completes)
    @rule(step=st.sampled_from(["WORK", "HANDOFF", "HANDOFF", "FINISH"]))
    def move_while_cancelling(self, step: str) -> None:
        """Q7 × W1/W3: a user's cancel is accepted and its stop under way (a stubborn turn
        waits out the interrupt) when the task moves: the cancel parks the backlog wherever
        the move takes it (a transfer carries the pause over, TRANSFER)."""

        async def go() -> str:
            engine = self.engine_
            run = await self.agent.run_for(engine.core.runners[self.sid].turn.id)
            cancel = asyncio.ensure_future(engine.cancel(PRINCIPAL, self.sid))
            await within(run.signalled.wait(), 30)  # accepted: the stop has begun
            _, session = await engine.move_task(PRINCIPAL, self.task_id, step)
            result = await cancel
            # C1/C8: the move's own stop of the same turn holds a reference of its own, so the
            # cancel may answer (pending still true) before the move released it; once both
            # are done nothing is pending, at a revision no older than the cancel's answer.
            after = await engine.cancellation(self.sid)
            assert after.pending is False, after
            assert after.revision >= result.cancellation.revision
            if result.cancellation.pending:
                assert after.revision > result.cancellation.revision
            await self._drop_asks()
            await settle(engine, session.id)
            return session.id

        current = self.run(go())
        self.model.cancel(None)
        transfer = next(s for s in self.model.steps if s.name == step).new_session_on_enter
        self.model.move(step, current if transfer else None)
        TALLY[f"move-while-cancelling:{step}"] += 1
        TALLY["operations"] += 1

    # -- workflow (W1, W3) and the process (M6) ------------------------------------------------
    @rule(step=st.sampled_from(["WORK", "PLAN", "PLAN", "HANDOFF", "HANDOFF", "FINISH"]))
    def move(self, step: str) -> None:
        async def go() -> Any:
            result = await self.engine_.move_task(PRINCIPAL, self.task_id, step)
            await settle(self.engine_, result[1].id)
            return result

        result, _ = self.apply(
            f"moveTask:{step}",
            go,
            lambda r: self.model.move(step, r[1].id if r else None),
        )
        assert result is not None
        task, session = result
        assert task.workflow_step == step and session.id == self.sid

    @rule(crash=st.booleans())
    def restart(self, crash: bool) -> None:
        async def go() -> None:
            await self._close(crash)
            await settle(self.engine_, self.sid)

        self.run(go())
        self.model.restart(crash)
        TALLY["restart:crash" if crash else "restart:graceful"] += 1
        TALLY["operations"] += 1

    # -- agreement and invariants --------------------------------------------------------------
    @invariant()
    def engine_agrees_with_model(self) -> None:
        self.run(self._check())
        TALLY["checks"] += 1

    async def _check(self) -> None:
        engine = self.engine_
        running = engine.core.runners.get(self.sid)
        # A5: an agent whose turn ended (completed, failed, cancelled, replaced, transferred)
        # gives up its waits; the running turn's stay.
        await self._drop_asks(keep=running.turn.id if running is not None else None)
        task = await engine.task(PRINCIPAL, self.task_id)
        assert task is not None and task.current_session_id == self.sid
        assert task.workflow_step == self.model.step
        everything: Counter[str] = Counter()
        self.visible = {}
        for ms in self.model.sessions:
            parts = await self._check_session(engine, ms)
            everything.update(parts)
        expected_runners = {self.sid} if self.model.current.running is not None else set()
        assert set(engine.core.runners) == expected_runners, "runners differ from the model"
        # Q10: every created content exactly once in queue ∪ turns, nothing unknown.
        ledger = +self.ledger
        assert everything == ledger, (
            f"lost/duplicated: {(ledger - everything) + (everything - ledger)}"
        )
        assert Counter(self.model.live_contents()) == ledger

    async def _check_session(self, engine: Engine, ms: ModelSession) -> list[str]:
        sid = ms.id
        status = await engine.queue_status(sid)
        session = await engine.session(PRINCIPAL, sid)
        turns = await engine.turns_of(sid, 200)
        asked = await clarification(engine, sid)
        cancellation = await engine.cancellation(sid)
        assert session is not None
        where = f"session {sid[:8]}"
        # Observable state equals the model's.
        assert [(e.id, e.content) for e in status.entries] == [
            (e.id, e.content) for e in ms.entries
        ], f"{where}: queue differs"
        assert (status.auto_run, status.pause_reason) == (ms.auto_run, ms.pause_reason), (
            f"{where}: policy {(status.auto_run, status.pause_reason)} != model "
            f"{(ms.auto_run, ms.pause_reason)}"
        )
        assert set(status.held_by) == ms.holds(), f"{where}: heldBy {status.held_by}"
        assert session.state is ms.state, f"{where}: state {session.state} != {ms.state}"
        assert (asked.question if asked else None) == ms.clarification
        assert [(t.prompt, t.status) for t in turns] == [(t.prompt, t.status) for t in ms.turns], (
            f"{where}: turns differ"
        )
        for turn, model_turn in zip(turns, ms.turns, strict=True):
            if model_turn.error is not None:
                assert turn.error == model_turn.error, f"{where}: turn error {turn.error!r}"
        # C1/C5: nothing is being cancelled between operations.
        assert cancellation.pending is False, f"{where}: cancellationPending stuck"
        # A6, M6: an approval waits only while the model's running turn asked one; no ended
        # turn's approval reads PENDING (a crash's recovery settles it).
        pending = await pending_approval(engine, sid)
        assert (pending is not None) is (ms.approval and ms.running is not None), where
        await self._approvals_settled(engine, sid)
        # Q13/R1/R2: revisions never go back; the queue's moves with every status change.
        previous = self.queue_revisions.get(sid)
        if previous is not None:
            assert status.revision >= previous, f"{where}: queue revision went back"
            if self.statuses.get(sid) != ms.queue_status():
                assert status.revision > previous, f"{where}: queue changed, revision did not"
        self.queue_revisions[sid] = status.revision
        self.statuses[sid] = ms.queue_status()
        assert session.revision >= self.session_revisions.get(sid, 0), "session revision back"
        self.session_revisions[sid] = session.revision
        self._check_cancellation_revision(sid, cancellation.revision)
        self.visible.update({e.id: e.content for e in status.entries})
        contents = [e.content for e in status.entries]
        for turn in turns:
            contents.extend(turn.prompt.split("\n\n"))
        return contents

    def _check_cancellation_revision(self, sid: str, revision: int) -> None:
        """R2/C7: never back; 0 only from a process that has said nothing about the session."""
        if revision == 0:
            assert sid in self.fresh_process or sid not in self.cancel_revisions, (
                f"cancellation revision of {sid[:8]} fell to 0 within one process"
            )
            return
        self.fresh_process.discard(sid)
        assert revision >= self.cancel_revisions.get(sid, 0), "cancellation revision went back"
        self.cancel_revisions[sid] = revision


def _settings() -> settings:
    return settings(
        max_examples=EXAMPLES,
        stateful_step_count=STEPS,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )


@pytest.fixture
def machine(databases: Databases, tmp_path: Path) -> Iterator[type[EngineMachine]]:
    class Machine(EngineMachine):
        pass

    Machine.dbs = databases
    Machine.tmp = tmp_path
    yield Machine


@pytest.mark.timeout(900)
def test_engine_agrees_with_the_reference_model_q1_q14_c1_c9_w3_m6(
    machine: type[EngineMachine],
) -> None:
    """Q1–Q14, C1/C5/C8/C9, W1/W3, M6, R1/R2: random operation sequences, model vs engine."""
    before = TALLY.copy()
    try:
        run_state_machine_as_test(machine, settings=_settings())
    finally:
        done = TALLY - before
        print(
            f"\nmodel: {done['examples']} examples, {done['operations']} operations, "
            f"{done['checks']} checks, {done['restart:crash']} crashes, "
            f"{done['restart:graceful']} graceful restarts"
        )
        print("  " + ", ".join(f"{k}={v}" for k, v in sorted(done.items()) if ":" in k))


async def _engine(settings_: Settings, agent: ManualAgent) -> tuple[Engine, SqlStore]:
    store = await open_store(settings_)
    agents: Any = {"scripted": agent}
    return await Engine.open(settings_, store, EventBus(64), agents=agents), store


async def test_q9_m6_an_auto_run_queue_resumes_after_a_graceful_restart(database_url: str) -> None:
    """Found by the model test (fixed by the start-up sweep): a graceful close stops the
    running turn without draining; the restarted engine must run the queue left eligible."""
    settings_ = Settings(database_url=database_url, cancel_timeout=0.2, escalation_timeout=2.0)
    agent = ManualAgent()
    engine, store = await _engine(settings_, agent)
    _, session = await engine.create_task(PRINCIPAL, "graceful", None)
    await engine.send_message(PRINCIPAL, session.id, "working")
    await agent.next_run()
    await engine.enqueue(PRINCIPAL, session.id, "next", None)
    await engine.aclose()
    await store.close()

    second = ManualAgent()
    engine, store = await _engine(settings_, second)
    try:
        assert session.id in engine.core.runners, "the queue stalled after a graceful restart"
        assert (await second.next_run()).prompt == "next"
    finally:
        await engine.aclose()
        await store.close()


async def test_q9_c9_withdrawing_a_clarification_lets_an_auto_run_queue_run(
    database_url: str,
) -> None:
    settings_ = Settings(database_url=database_url, cancel_timeout=0.2, escalation_timeout=2.0)
    agent = ManualAgent()
    engine, store = await _engine(settings_, agent)
    try:
        _, session = await engine.create_task(PRINCIPAL, "withdraw", None)
        await engine.send_message(PRINCIPAL, session.id, "work")
        run = await agent.next_run()
        await engine.enqueue(PRINCIPAL, session.id, "queued", None)
        run.complete(clarification="which one?")  # the turn ends asking; the queue is held
        await settle(engine, session.id)
        held = await engine.queue_status(session.id)
        assert held.auto_run is True and [e.content for e in held.entries] == ["queued"]
        outcome = await engine.cancel(PRINCIPAL, session.id)  # C9: withdraws the question
        assert outcome.outcome is CancelOutcome.NOTHING_RUNNING
        # Q9 "ON means run when eligible": the held queue runs now. (A bug this test found:
        # the withdrawal used to leave the queue idle with autoRun ON and nothing holding it.)
        assert session.id in engine.core.runners, "the queue stays idle with autoRun ON"
        assert (await agent.next_run()).prompt == "queued"
        status = await engine.queue_status(session.id)
        assert status.auto_run is True and status.held_by == ("BUSY",)
    finally:
        await engine.aclose()
        await store.close()
