"""A small, pure reference model of one task's sessions, their queues and turns (SPEC §1–§5).

It knows nothing of the engine: no I/O, no asyncio, no database. The stateful test
(``test_model_stateful.py``) runs every operation on the real engine and on this model and
compares what it can observe. Entry ids are the engine's (the model cannot invent them): an
operation that creates an entry is given the id the engine answered with.

What it models, rule by rule:

- Q1/Q14 the durable ``auto_run`` and its pause reason (USER, CANCEL, TRANSFER);
- Q2 setAutoRun (ON starts the head when eligible, OFF never touches the active turn);
- Q3/Q4 automatic drains (a turn's end, enqueue, setAutoRun(true), entering a step, recovery)
  start at most one head entry and obey ``auto_run``; targeted starts (sendMessage, sendNow,
  drain, answerClarification) do not read it;
- Q5 sendNow ``ENTRY``/``ALL``: claim, auto-run ON, replace the active turn (CANCELLED, C8);
- Q6 drain; Q7 explicit cancel parks a non-empty backlog (pause reason CANCEL); C9 cancel with
  nothing running withdraws a clarification and changes nothing else;
- Q9 holds at rest (BUSY, NOT_PROMPTABLE, CLARIFICATION); Q11 capacity; Q12 edit, remove, clear,
  reorder (exactly the visible entries, else QUEUE_CHANGED); Q13 ``expectedRevision`` (the model
  is told only whether the value given was stale);
- clarifications (§1): the asking turn ends COMPLETED, nothing drains while one is pending,
  sendMessage/sendNow/drain answer CLARIFICATION_PENDING, answerClarification starts the answer;
- W1/W2 a step with ``on_turn_complete = MOVE_TO_NEXT`` moves the task when a turn completes
  (not when it asks, fails or is replaced), and on a user's cancel when it also sets
  ``cancel_triggers_turn_complete``;
- W1/W3 moving the task: entering a ``new_session_on_enter`` step transfers the queue to a new
  session (tail, in order, ids kept; destination auto-run = source AND ON, reason TRANSFER; the
  source loses its policy row, reads ON again, and becomes COMPLETED; its running turn is stopped
  by an internal cancellation, so it ends CANCELLED); entering the last step completes a waiting
  session (a prompt reopens it), and a running one when its turn ends (leaving the last step
  before then takes that back); then one automatic drain on the task's current session;
- M6/Q10 a restart: a crash leaves the running turn to recovery (FAILED ``interrupted``); a
  graceful close stops it (FAILED); then every queue left eligible drains once (start-up sweep).

Cancel with nothing running withdraws a clarification (C9); the queue it was holding is then
eligible and drains once (Q9: ON means run when eligible; see
``test_q9_c9_withdrawing_a_clarification_lets_an_auto_run_queue_run``).

Where several refusals apply at once the SPEC does not fix which one is reported, so the model
answers the set of acceptable codes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from turnqueue.domain import BUSY, PROMPTABLE, HoldReason, PauseReason, SessionState, TurnStatus
from turnqueue.errors import ErrorCode


class Refused(Exception):
    """The model's answer to an operation that must change nothing: any of ``codes``."""

    def __init__(self, codes: set[ErrorCode]) -> None:
        super().__init__(", ".join(sorted(codes)))
        self.codes = frozenset(codes)


class Admitted(StrEnum):
    """What sendMessage did with a prompt."""

    TURN = "TURN"
    QUEUED = "QUEUED"


@dataclass
class ModelEntry:
    id: str
    content: str


@dataclass
class ModelTurn:
    prompt: str
    status: TurnStatus = TurnStatus.RUNNING
    error: str | None = None


@dataclass
class ModelSession:
    id: str
    state: SessionState = SessionState.WAITING_FOR_INPUT
    entries: list[ModelEntry] = field(default_factory=list)
    auto_run: bool = True
    pause_reason: PauseReason | None = None
    clarification: str | None = None
    turns: list[ModelTurn] = field(default_factory=list)
    #: the task reached its last step while a turn ran: that turn's end completes the session
    complete_on_idle: bool = False
    #: A6: the running turn's agent waits for an approval (the turn's end settles it)
    approval: bool = False

    @property
    def running(self) -> ModelTurn | None:
        if self.turns and self.turns[-1].status is TurnStatus.RUNNING:
            return self.turns[-1]
        return None

    @property
    def promptable(self) -> bool:
        return self.state in PROMPTABLE

    def holds(self) -> set[HoldReason]:
        """Q9 holds at rest (no cancellation or step change is under way between operations)."""
        holds: set[HoldReason] = set()
        if self.state in BUSY or self.running is not None:
            holds.add(HoldReason.BUSY)
        elif not self.promptable:
            holds.add(HoldReason.NOT_PROMPTABLE)
        if self.clarification is not None:
            holds.add(HoldReason.CLARIFICATION)
        if self.approval and self.running is not None:
            holds.add(HoldReason.APPROVAL)
        return holds

    def queue_status(self) -> tuple[object, ...]:
        """What a change of must bump the queue revision (Q13)."""
        return (
            tuple((e.id, e.content) for e in self.entries),
            self.auto_run,
            self.pause_reason,
            frozenset(self.holds()),
        )

    def entry(self, entry_id: str) -> ModelEntry | None:
        return next((e for e in self.entries if e.id == entry_id), None)


@dataclass(frozen=True)
class ModelStep:
    name: str
    new_session_on_enter: bool = False
    move_on_complete: bool = False  # on_turn_complete = MOVE_TO_NEXT (W1)
    cancel_completes: bool = False  # cancel_triggers_turn_complete (W2)


class TaskModel:
    """One task: its sessions (the current one last) and its workflow step."""

    def __init__(self, session_id: str, steps: Sequence[ModelStep], queue_max: int | None) -> None:
        self.steps = list(steps)
        self.step = self.steps[0].name
        self.queue_max = queue_max
        self.sessions = [ModelSession(session_id)]

    @property
    def current(self) -> ModelSession:
        return self.sessions[-1]

    # -- helpers --------------------------------------------------------------------------------
    @staticmethod
    def _refuse_if(conditions: dict[ErrorCode, bool]) -> None:
        codes = {code for code, applies in conditions.items() if applies}
        if codes:
            raise Refused(codes)

    def _full(self, s: ModelSession) -> bool:
        return self.queue_max is not None and len(s.entries) + 1 > self.queue_max

    @staticmethod
    def _blocked(s: ModelSession) -> bool:
        return not s.promptable or s.clarification is not None or s.running is not None

    @staticmethod
    def _start(s: ModelSession, prompt: str) -> ModelTurn:
        turn = ModelTurn(prompt)
        s.turns.append(turn)
        s.state = SessionState.RUNNING
        return turn

    @staticmethod
    def _end(
        s: ModelSession, status: TurnStatus, error: str | None = None, question: str | None = None
    ) -> None:
        turn = s.running
        assert turn is not None, "no running turn to end"
        turn.status = status
        turn.error = error
        s.approval = False  # A6, M6: an ended turn's approval is settled
        s.state = SessionState.WAITING_FOR_INPUT  # every turn end (§1)
        if s.complete_on_idle:  # §1 COMPLETED: the task reached its last step meanwhile
            s.state, s.complete_on_idle = SessionState.COMPLETED, False
        if question is not None:
            s.clarification = question

    def _auto_drain(self, s: ModelSession) -> ModelTurn | None:
        """Q3/Q4: an automatic reservation; obeys the holds (Q9) and ``auto_run``."""
        if self._blocked(s) or not s.entries or not s.auto_run:
            return None
        head = s.entries.pop(0)
        return self._start(s, head.content)

    # -- client operations ----------------------------------------------------------------------
    def enqueue(self, entry_id: str | None, content: str, stale: bool) -> ModelTurn | None:
        s = self.current
        self._refuse_if({ErrorCode.QUEUE_CHANGED: stale, ErrorCode.QUEUE_FULL: self._full(s)})
        assert entry_id is not None
        s.entries.append(ModelEntry(entry_id, content))
        return self._auto_drain(s)

    def send_message(self, entry_id: str | None, content: str) -> Admitted:
        s = self.current
        self._refuse_if({ErrorCode.CLARIFICATION_PENDING: s.clarification is not None})
        if not self._blocked(s):
            self._start(s, content)
            return Admitted.TURN
        self._refuse_if({ErrorCode.QUEUE_FULL: self._full(s)})
        assert entry_id is not None
        s.entries.append(ModelEntry(entry_id, content))
        return Admitted.QUEUED

    def update_entry(self, entry_id: str, content: str, stale: bool) -> None:
        s = self.current
        entry = s.entry(entry_id)
        self._refuse_if({ErrorCode.QUEUE_CHANGED: stale, ErrorCode.ENTRY_NOT_FOUND: entry is None})
        assert entry is not None
        entry.content = content

    def remove_entry(self, entry_id: str, stale: bool) -> None:
        s = self.current
        entry = s.entry(entry_id)
        self._refuse_if({ErrorCode.QUEUE_CHANGED: stale, ErrorCode.ENTRY_NOT_FOUND: entry is None})
        s.entries = [e for e in s.entries if e.id != entry_id]

    def clear(self, stale: bool) -> None:
        self._refuse_if({ErrorCode.QUEUE_CHANGED: stale})
        self.current.entries = []

    def reorder(self, ordered_ids: Sequence[str], stale: bool) -> None:
        s = self.current
        visible = [e.id for e in s.entries]
        exact = len(set(ordered_ids)) == len(ordered_ids) and sorted(ordered_ids) == sorted(visible)
        self._refuse_if({ErrorCode.QUEUE_CHANGED: stale or not exact})
        by_id = {e.id: e for e in s.entries}
        s.entries = [by_id[i] for i in ordered_ids]

    def set_auto_run(self, on: bool, stale: bool) -> ModelTurn | None:
        s = self.current
        self._refuse_if({ErrorCode.QUEUE_CHANGED: stale})
        if not on:
            s.auto_run, s.pause_reason = False, PauseReason.USER
            return None
        s.auto_run, s.pause_reason = True, None
        return self._auto_drain(s)

    def send_now(self, entry_id: str | None, stale: bool) -> ModelTurn:
        """Q5: ``entry_id`` None is scope ALL."""
        s = self.current
        if entry_id is None:
            claimed = list(s.entries)
            missing = {ErrorCode.QUEUE_EMPTY: not claimed}
        else:
            entry = s.entry(entry_id)
            claimed = [entry] if entry is not None else []
            missing = {ErrorCode.ENTRY_NOT_FOUND: entry is None}
        self._refuse_if(
            {
                ErrorCode.QUEUE_CHANGED: stale,
                ErrorCode.CLARIFICATION_PENDING: s.clarification is not None,
                **missing,
            }
        )
        s.entries = [e for e in s.entries if e not in claimed]
        s.auto_run, s.pause_reason = True, None
        if s.running is not None:  # the replacement: pending wins (C8), no pause (Q7)
            self._end(s, TurnStatus.CANCELLED)
        return self._start(s, "\n\n".join(e.content for e in claimed))

    def drain(self, stale: bool) -> ModelTurn | None:
        s = self.current
        self._refuse_if(
            {
                ErrorCode.QUEUE_CHANGED: stale,
                ErrorCode.CLARIFICATION_PENDING: s.clarification is not None,
                ErrorCode.SESSION_BUSY: s.running is not None,
                ErrorCode.SESSION_NOT_PROMPTABLE: s.running is None and not s.promptable,
            }
        )
        s.auto_run, s.pause_reason = True, None
        if self._blocked(s) or not s.entries:
            return None
        return self._start(s, s.entries.pop(0).content)  # targeted: does not read auto_run

    def cancel(self, new_session_id: str | None = None) -> bool:
        """A user's cancel; answers whether something was running (else NOTHING_RUNNING).
        ``new_session_id``: the session a W2 move's transfer created, if any."""
        s = self.current
        if s.running is None:
            if s.clarification is not None:
                s.clarification = None  # C9: withdraws a pending clarification ...
                self._auto_drain(s)  # ... which held the queue (Q9)
            return False
        self._end(s, TurnStatus.CANCELLED)  # C8
        if s.entries:  # Q7: park the backlog
            s.auto_run, s.pause_reason = False, PauseReason.CANCEL
        step = self._step()
        following = self._following()
        if step.cancel_completes and step.move_on_complete and following is not None:
            self._enter(following, new_session_id)  # W2, then one drain (W1)
            self._auto_drain(self.current)
        self._auto_drain(s)  # obeys the policy Q7 just set: never starts anything here
        return True

    def answer(self, content: str, wrong_id: bool) -> ModelTurn:
        s = self.current
        self._refuse_if({ErrorCode.NO_CLARIFICATION: s.clarification is None or wrong_id})
        s.clarification = None
        return self._start(s, content)

    # -- the agent --------------------------------------------------------------------------------
    def complete(
        self, question: str | None = None, new_session_id: str | None = None
    ) -> ModelTurn | None:
        """The turn completes (asking ``question``). W1: a step that moves on completion moves
        the task (no drain in the same breath), then one drain on its current session."""
        s = self.current
        self._end(s, TurnStatus.COMPLETED, question=question)
        following = self._following()
        if question is None and self._step().move_on_complete and following is not None:
            self._enter(following, new_session_id)
        return self._auto_drain(self.current)  # Q4 (held by a new clarification)

    def fail(self, error: str = "boom") -> ModelTurn | None:
        s = self.current
        self._end(s, TurnStatus.FAILED, error=error)
        return self._auto_drain(s)

    # -- workflow ---------------------------------------------------------------------------------
    def _step(self) -> ModelStep:
        return next(s for s in self.steps if s.name == self.step)

    def _following(self) -> ModelStep | None:
        index = self.steps.index(self._step())
        return self.steps[index + 1] if index + 1 < len(self.steps) else None

    def move(self, step_name: str, new_session_id: str | None) -> ModelTurn | None:
        """W1/W3: enter ``step_name``; ``new_session_id`` is the session a transfer created."""
        self._enter(next(s for s in self.steps if s.name == step_name), new_session_id)
        return self._auto_drain(self.current)

    def _enter(self, step: ModelStep, new_session_id: str | None) -> None:
        self.step = step.name
        source = self.current
        if step.new_session_on_enter:
            assert new_session_id is not None and new_session_id != source.id
            if source.running is not None:  # stopped by an internal cancellation (C8)
                self._end(source, TurnStatus.CANCELLED)
            destination = ModelSession(new_session_id, entries=source.entries)
            if not source.auto_run:  # source AND destination(ON)
                destination.auto_run, destination.pause_reason = False, PauseReason.TRANSFER
            source.entries = []
            source.auto_run, source.pause_reason = True, None  # the policy row is gone
            source.state = SessionState.COMPLETED
            self.sessions.append(destination)
        elif step.name == self.steps[-1].name and source.state is SessionState.WAITING_FOR_INPUT:
            source.state = SessionState.COMPLETED
        else:  # the last step reached while a turn runs completes the session at its end
            last = step.name == self.steps[-1].name
            source.complete_on_idle = last and source.state is SessionState.RUNNING

    # -- the server process -----------------------------------------------------------------------
    def restart(self, crash: bool) -> list[ModelTurn]:
        """M6: a crash leaves the running turn to recovery (FAILED ``interrupted``); a graceful
        close stops it (FAILED). Then the start-up sweep drains every queue left eligible
        (Q9: ON means "run when eligible", after a restart too)."""
        s = self.current
        if s.running is not None:
            self._end(s, TurnStatus.FAILED, error="interrupted" if crash else None)
        return [turn for session in self.sessions if (turn := self._auto_drain(session))]

    # -- what must hold whatever happened ---------------------------------------------------------
    def live_contents(self) -> list[str]:
        """Every content still somewhere: queued or the prompt (part) of a turn."""
        contents = [e.content for s in self.sessions for e in s.entries]
        for s in self.sessions:
            for turn in s.turns:
                contents.extend(turn.prompt.split("\n\n"))
        return contents
