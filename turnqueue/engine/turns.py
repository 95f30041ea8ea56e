"""Starting and ending turns: prompt admission, automatic drains (Q3, Q4), pending wins (C8).

Every function here that starts or ends a turn runs under the session lock (see ``core``); the
database lock row (``tx.lock``) is taken first in every transaction that reserves or starts.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from enum import StrEnum

from turnqueue.agents import AgentResult
from turnqueue.bus import Event, EventKind
from turnqueue.domain import (
    BUSY,
    PROMPTABLE,
    AgentErrorKind,
    HoldReason,
    MessageSource,
    OutputChunk,
    QueueEntry,
    QueueStatus,
    SendOutcome,
    SentMessage,
    Session,
    Turn,
    TurnStatus,
    utcnow,
)
from turnqueue.engine.change import Change
from turnqueue.engine.core import Core, check_capacity, held_by
from turnqueue.engine.runner import Ending, TurnRunner
from turnqueue.errors import Conflict, ErrorCode
from turnqueue.store import SessionView

log = logging.getLogger(__name__)


# -- what a turn's end means, and whether a queue drains: pure decisions, no database ---------
# Taken under the session lock and written in one unit of work by ``Turns``; each rule is tested
# on its own (tests/engine/test_turn_end_decision.py): C8 (pending wins: CANCELLED, nothing
# drains), a completion's question becomes the clarification (Q9), W1 (a move drains only once
# it committed), Q9 (an unreadable guard holds), Q3 (automatic obeys auto-run, targeted not).


class DrainResult(StrEnum):
    STARTED = "STARTED"
    PAUSED = "PAUSED"  # auto-run is off (Q3: "paused" is told apart from "empty")
    EMPTY = "EMPTY"
    HELD = "HELD"  # Q9: busy, not promptable, clarification, cancelling, transition


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


def view_holds(view: SessionView) -> bool:
    """Q9, from the locked view alone: a hold ``heldBy`` shows, or a turn running (on any
    instance)."""
    return view.running_turn_id is not None or bool(held_by(view))


def drain_decision(view: SessionView, *, automatic: bool, held: bool) -> DrainResult | None:
    """Q3: what a drain of the locked ``view`` does; None: reserve the head. ``held`` is every
    hold (Q9) and a shutdown; an automatic drain obeys auto-run, a targeted one (Q6) not."""
    if held:
        return DrainResult.HELD
    if view.queued == 0:
        return DrainResult.EMPTY
    if automatic and not view.policy.auto_run:
        return DrainResult.PAUSED
    return None


@dataclass(frozen=True, slots=True)
class Admission:
    """What a send did (Q16): started ``turn``, queued ``entry``, or steered into ``turn``;
    ``session`` and ``queue``: the state the send left, as its own transaction committed it
    (``Engine.send_message`` always sets them: a mutation's whole answer, R3)."""

    turn: Turn | None = None
    entry: QueueEntry | None = None
    outcome: SendOutcome = SendOutcome.STARTED
    session: Session | None = None
    queue: QueueStatus | None = None


class Turns:
    def __init__(
        self,
        core: Core,
        *,
        moves_on_complete: Callable[[str], Awaitable[bool]],
        on_completed: Callable[[str], Awaitable[None]],
    ) -> None:
        self.core = core
        #: W1 guard: called (under the session lock, before the end is written) to know
        #: whether the step makes this completion move the task on
        self.moves_on_complete = moves_on_complete
        #: W1 action: called after a COMPLETED turn's end has committed, outside the session
        #: lock, when ``moves_on_complete`` said the task moves; it runs the drain itself.
        self.on_completed = on_completed

    # -- starting -----------------------------------------------------------------------------
    def launch(self, turn: Turn, agent_name: str) -> None:
        """Run a committed turn: ``start_in`` has its unit of work call this at COMMIT, still
        under the session lock."""
        runner = TurnRunner(turn, self.core.agents[agent_name], self.core.bus, self.core.store)
        self.core.runners[turn.session_id] = runner
        runner.task = self.core.spawn(runner.run(self._on_end), name=f"turn:{turn.id}")
        self.core.metrics.turn_started()

    def blocked(self, view: SessionView, ending: TurnRunner | None = None) -> bool:
        """Q9 holds; ``ending`` is a runner whose end is being written (it holds nothing)."""
        runner = self.core.runners.get(view.session.id)
        return view_holds(view) or (runner is not None and runner is not ending)

    async def start_in(
        self,
        c: Change,
        prompt: str,
        source: MessageSource,
        consume: list[str],
        entry: QueueEntry | None = None,
        client_message_id: str | None = None,
    ) -> Turn:
        """Start a turn of this instance in ``c``, consuming the entries ``consume`` (Q10);
        it is launched once ``c`` has committed. ``entry``: the one queue entry it starts from
        (Q16), whose key it carries (Q15); ``client_message_id``: the key of a send that starts
        it directly."""
        turn = await c.tx.start_turn(
            c.session_id,
            prompt=prompt,
            source=source,
            consume=consume,
            owner=self.core.instance,
            client_message_id=entry.client_message_id if entry is not None else client_message_id,
            entry_id=entry.id if entry is not None else None,
        )
        c.session_changed()
        await c.queue_changed()  # BUSY is now a hold
        agent = c.view.session.agent
        c.on_commit(lambda: self.launch(turn, agent))
        return turn

    async def reserve(
        self, session_id: str, *, automatic: bool = True
    ) -> tuple[DrainResult, Turn | None, QueueStatus | None]:
        """A reservation in a unit of work of its own; the caller holds the session lock.
        *Automatic* (Q3) obeys auto-run; *targeted* (the Q6 drain) does not read it, obeys the
        holds, and answers the queue status its transaction committed (None when the instance
        is closing: no transaction)."""
        kind = "automatic" if automatic else "targeted"
        if self.core.closing:
            self.core.metrics.reservation(kind, DrainResult.HELD.value)
            return DrainResult.HELD, None, None
        async with self.core.change(session_id, session_lock=False, status=not automatic) as c:
            result, turn = await self.reserve_in(c, c.view, automatic=automatic)
        self.core.metrics.reservation(kind, result.value)
        return result, turn, c.status

    async def reserve_in(
        self, c: Change, view: SessionView, *, automatic: bool, ending: TurnRunner | None = None
    ) -> tuple[DrainResult, Turn | None]:
        """The Q3 decision and reservation inside the caller's unit of work, which has taken
        the lock row (``view``: its view, or what its changes made of it): the policy is read
        in the transaction that reserves. The turn is launched after COMMIT."""
        held = self.core.closing or self.blocked(view, ending)
        decided = drain_decision(view, automatic=automatic, held=held)
        if decided is not None:
            return decided, None
        entry = await c.tx.reserve_head(view.session.id, owner=self.core.instance)
        if entry is None:
            return DrainResult.EMPTY, None
        turn = await self.start_in(c, entry.content, entry.source, [entry.id], entry)
        return DrainResult.STARTED, turn

    async def send_message(
        self, session_id: str, content: str, client_message_id: str | None = None
    ) -> Admission:
        """Start a turn when the session is free (targeted), queue it when busy. A send whose
        ``client_message_id`` was sent before answers that send's outcome (Q15). The answer
        carries the session and queue status this transaction committed."""
        async with self.core.change(session_id, status=True) as c:
            admission = await self.send_in(c, content, client_message_id)
            session = await c.tx.get_session(session_id)  # after the body's last write
        return replace(admission, session=session, queue=c.status)

    async def send_in(self, c: Change, content: str, key: str | None) -> Admission:
        """In ``c``: :meth:`admit`, recorded under ``key``; a key sent before answers that
        send's outcome instead (Q15)."""
        if key is not None:
            replayed = await replay(c, key, content)
            if replayed is not None:
                return replayed
        admission = await self.admit(c, content, key)
        if key is not None:
            await record(c, key, content, admission)
        return admission

    async def admit(self, c: Change, content: str, key: str | None) -> Admission:
        """In ``c``: start a turn when the session is free (targeted), queue when busy."""
        view = c.view
        if view.clarification is not None:
            raise Conflict(
                ErrorCode.CLARIFICATION_PENDING,
                "the agent asked a question: answer it with answerClarification",
            )
        if not self.blocked(view):
            turn = await self.start_in(c, content, MessageSource.USER, [], None, key)
            return Admission(turn=turn)
        if view.session.state in BUSY or view.session.state in PROMPTABLE:
            check_capacity(view, self.core.settings.queue_limit)
            entry = await c.tx.add_entry(
                c.session_id, content=content, source=MessageSource.USER, client_message_id=key
            )
            await c.queue_changed()
            return Admission(entry=entry, outcome=SendOutcome.QUEUED)
        raise Conflict(
            ErrorCode.SESSION_NOT_PROMPTABLE,
            f"session is {view.session.state}; it cannot take prompts",
        )

    async def answer_clarification(
        self, session_id: str, answer: str, clarification_id: str | None
    ) -> Turn:
        async with self.core.change(session_id) as c:
            pending = c.view.clarification
            if pending is None or (clarification_id is not None and clarification_id != pending.id):
                raise Conflict(
                    ErrorCode.NO_CLARIFICATION,
                    "no such clarification is pending",
                    ["clarificationId"] if pending is not None else None,
                )
            await c.clear_clarification()
            view = c.view
            if view.session.state not in PROMPTABLE or (
                view.cancelling or view.transitioning or view.approval_pending
            ):
                raise Conflict(ErrorCode.SESSION_BUSY, "the session cannot take the answer now")
            return await self.start_in(c, answer, MessageSource.USER, [])

    # -- ending -------------------------------------------------------------------------------
    async def _on_end(self, runner: TurnRunner, ending: Ending) -> None:
        """Record a turn's end, retrying until it commits (Q10, M6).

        What the end means is decided once, under the session lock (``turn_end``): C8 (pending
        wins) is read there, so no cancellation can be accepted between the decision and its
        commit.

        Hazard: an end that cannot commit (the database away, another process holding SQLite's
        write lock past ``db_timeout``) must not be dropped: nothing else would end the turn
        while this process lives (recovery only adopts a dead instance's turns), so the session
        would stay RUNNING with no agent and its queue would never run. The runner stays
        registered (BUSY) until the end commits; the session lock is released between attempts
        so that readers and other sessions' work go on. Only a shutdown gives up: recovery at
        the next start ends the turn then."""
        sid = runner.session_id
        end: TurnEnd | None = None
        delay = END_RETRY_FIRST
        while True:
            async with self.core.session_lock(sid):
                if end is None:
                    runner.ending = True
                    # C8: read under the session lock, under which this instance takes the
                    # CANCELLING holds of the turns it runs
                    pending = (await self.core.cancellation(sid)).pending
                    end = decide_end(ending.result, pending=pending)
                    if end.asks_workflow:
                        end = with_move(end, await self._read_moves(sid))
                try:
                    drained, end = await self._record_end(runner, ending, end)
                except Exception:
                    log.exception("could not record the end of turn %s", runner.turn.id)
                    if self.core.closing:
                        # Given up at shutdown: the turn stays RUNNING in the database and
                        # recovery (M6) ends it at the next start.
                        self._finish(runner, given_up(end), None)
                        return
                else:
                    self._finish(runner, end, drained)
                    break
            await asyncio.sleep(delay)
            delay = min(delay * 2, END_RETRY_MAX)
        if end.moving:
            await self.on_completed(sid)

    async def _read_moves(self, session_id: str) -> bool | None:
        """W1: does this completion move the task on? None when the guard cannot be read."""
        try:
            return await self.moves_on_complete(session_id)
        except Exception:
            # The end is still recorded; only the drain waits (Q9).
            log.exception("could not read the workflow step of session %s", session_id)
            return None

    async def _record_end(
        self, runner: TurnRunner, ending: Ending, end: TurnEnd
    ) -> tuple[DrainResult | None, TurnEnd]:
        """The end's one unit of work: the turn, the session, the clarification, and the next
        entry (Q4), launched after COMMIT. Returns the drain's result and the end recorded. The
        caller holds the session lock.

        Hazard (M6): an instance declared dead while merely slow keeps running its turns until
        it learns so, and another instance's recovery may have ended one already (``FAILED``,
        interrupted; the database keeps the first end). Then that end is the turn's: it is what
        this instance publishes, and nothing of its own end (question, step change, drain)
        happens."""
        sid = runner.session_id
        drained: DrainResult | None = None
        # The lock row first, as in every transaction that changes a session: one lock order
        # everywhere, so recovery on another instance cannot deadlock with this end (lock row,
        # then turn, then session).
        async with self.core.change(sid, session_lock=False) as c:
            ended_elsewhere = c.view.running_turn_id != runner.turn.id  # under the lock row
            if not ended_elsewhere:  # O1: the log's last batch, published before ``done``
                await runner.write_rest(c.tx)
            turn, session = await c.tx.end_turn(
                runner.turn.id,
                status=end.status,
                output=ending.output,
                error=end.error,
                error_kind=end.error_kind,
                agent_stderr=end.stderr,
            )
            c.session_changed()
            output = ending.output
            if ended_elsewhere:  # ``end_turn`` changed nothing: the recorded end is the turn's
                end = TurnEnd(turn.status, turn.error, None, pending=True)  # drains nothing
                output = turn.output
            if end.question is not None:
                await c.set_clarification(turn_id=runner.turn.id, question=end.question)
            if end.moving:
                # W1: the queue is held from this end until the step change has committed
                # (handed to it: ``on_completed`` releases it), in this end's own revision.
                await c.tx.change_hold(sid, self.core.instance, HoldReason.WORKFLOW_TRANSITION, 1)
            await c.queue_changed()
            done = OutputChunk(sid, runner.turn.id, len(output), "", True, end.status)
            c.tx.after_commit(
                lambda: self.core.bus.publish(Event(EventKind.OUTPUT, sid, chunk=done))
            )
            if end.drains:
                # Q4 in the end's own transaction (one commit per turn end), under the same
                # lock row; this runner, whose end this is, holds nothing. A task that moves
                # steps drains later, once the move has committed (W1).
                after = view_after_end(c.view, session, runner.turn.id, end.question)
                if after is None:
                    after = await c.tx.view(sid)
                if after is not None:
                    drained, _ = await self.reserve_in(c, after, automatic=True, ending=runner)
        return drained, end

    def _finish(self, runner: TurnRunner, end: TurnEnd, drained: DrainResult | None) -> None:
        """After the end committed (or was given up; the next turn, if any, was launched at
        COMMIT): forget the runner. Called under the session lock."""
        sid = runner.session_id
        if self.core.runners.get(sid) is runner:
            del self.core.runners[sid]
        runner.final_status = end.status
        runner.finished.set()
        self.core.metrics.turn_ended(end.status.value)
        if end.error is None:
            log.info("turn %s ended %s", runner.turn.id, end.status.value)  # ids from context
        else:  # A11: every failure's reason is in the server log
            log.info("turn %s ended %s: %s", runner.turn.id, end.status.value, end.error)
        if drained is not None:
            self.core.metrics.reservation("automatic", drained.value)


#: Back-off between attempts to record a turn's end that could not commit.
END_RETRY_FIRST = 0.05
END_RETRY_MAX = 2.0


# -- idempotent sends (Q15) ----------------------------------------------------------------------
def content_digest(content: str) -> str:
    return hashlib.sha256(content.encode("utf-8", "surrogatepass")).hexdigest()


async def replay(c: Change, key: str, content: str) -> Admission | None:
    """What the send with this key did, if one was recorded (Q15): the same turn (as it is
    now) and the same entry (as it is now, or as it was queued once it has left the queue);
    IDEMPOTENCY_CONFLICT for the same key with other content. Read under the session's lock
    row (``c``), so a retry racing the first send reads what that send committed."""
    sent = await c.tx.sent_message(c.session_id, key)
    if sent is None:
        return None
    if sent.digest != content_digest(content):
        raise Conflict(
            ErrorCode.IDEMPOTENCY_CONFLICT,
            f"clientMessageId {key!r} was already sent in this session with other content",
            ["clientMessageId"],
        )
    turn = await c.tx.get_turn(sent.turn_id) if sent.turn_id is not None else None
    entry = None
    if sent.entry_id is not None:
        visible = {e.id: e for e in await c.tx.list_entries(c.session_id)}
        entry = visible.get(sent.entry_id) or QueueEntry(
            sent.entry_id,
            c.session_id,
            sent.position or 1,
            content,
            MessageSource.USER,
            sent.queued_at or utcnow(),
            key,
        )
    return Admission(turn=turn, entry=entry, outcome=sent.outcome)


async def record(c: Change, key: str, content: str, admission: Admission) -> None:
    """Q15: what this keyed send did, in its own unit of work."""
    entry, turn = admission.entry, admission.turn
    await c.tx.record_sent_message(
        c.session_id,
        SentMessage(
            key,
            content_digest(content),
            admission.outcome,
            entry.id if entry is not None else None,
            turn.id if turn is not None else None,
            entry.position if entry is not None else None,
            entry.queued_at if entry is not None else None,
        ),
    )
