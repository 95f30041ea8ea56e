"""Starting and ending turns: prompt admission, automatic drains (Q3, Q4), pending wins (C8).

Every function here that starts or ends a turn runs under the session lock (see ``core``). What
a turn's end means is decided in ``turn_end``; whether a drain starts the head here
(:func:`drain_decision`), both pure and tested without a database
(tests/engine/test_turn_end_decision.py).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import replace
from enum import StrEnum

from turnqueue.bus import Event, EventKind
from turnqueue.domain import (
    BUSY,
    PROMPTABLE,
    HoldReason,
    MessageSource,
    OutputChunk,
    QueueEntry,
    QueueStatus,
    SendOutcome,
    Turn,
)
from turnqueue.engine.admission import Admission, record, replay
from turnqueue.engine.core import Core
from turnqueue.engine.runner import Ending, TurnRunner
from turnqueue.engine.turn_end import TurnEnd, decide_end, given_up, view_after_end, with_move
from turnqueue.engine.unit_of_work import Change, check_capacity, held_by
from turnqueue.errors import Conflict, ErrorCode
from turnqueue.store import SessionView

log = logging.getLogger(__name__)


class DrainResult(StrEnum):
    STARTED = "STARTED"
    PAUSED = "PAUSED"  # auto-run is off (Q3: "paused" is told apart from "empty")
    EMPTY = "EMPTY"
    HELD = "HELD"  # Q9: busy, not promptable, clarification, cancelling, transition


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

    def launch(self, turn: Turn, agent_name: str) -> None:
        """Run a committed turn (at COMMIT, still under the session lock)."""
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
        """Start a turn of this instance in ``c`` consuming ``consume`` (Q10), launched once
        ``c`` has committed; ``entry``: the one entry it starts from (Q16), whose key it carries
        (Q15); ``client_message_id``: the key of a send that starts it directly."""
        turn = await c.tx.start_turn(
            c.session_id,
            prompt=prompt,
            source=source,
            consume=consume,
            owner=self.core.instance,
            client_message_id=entry.client_message_id if entry is not None else client_message_id,
            entry_id=entry.id if entry is not None else None,
        )
        agent = c.view.session.agent
        c.on_commit(lambda: self.launch(turn, agent))
        return turn

    async def reserve(
        self, session_id: str, *, automatic: bool = True
    ) -> tuple[DrainResult, Turn | None, QueueStatus | None]:
        """A reservation in a unit of work of its own (the caller holds the session lock):
        *automatic* (Q3) obeys auto-run; *targeted* (Q6) does not, and answers the queue status
        it committed (None when the instance is closing: no transaction)."""
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
        """In ``c``: start a turn when the session is free (targeted), queue when busy; recorded
        under ``key``, and a key sent before answers that send's outcome instead (Q15)."""
        replayed = await replay(c, key, content)
        if replayed is not None:
            return replayed
        view = c.view
        if view.clarification is not None:
            raise Conflict(
                ErrorCode.CLARIFICATION_PENDING,
                "the agent asked a question: answer it with answerClarification",
            )
        if not self.blocked(view):
            admission = Admission(
                await self.start_in(c, content, MessageSource.USER, [], None, key)
            )
        elif view.session.state in BUSY or view.session.state in PROMPTABLE:
            check_capacity(view, self.core.settings.queue_limit)
            entry = await c.tx.add_entry(
                c.session_id, content=content, source=MessageSource.USER, client_message_id=key
            )
            admission = Admission(entry=entry, outcome=SendOutcome.QUEUED)
        else:
            raise Conflict(
                ErrorCode.SESSION_NOT_PROMPTABLE,
                f"session is {view.session.state}; it cannot take prompts",
            )
        await record(c, key, content, admission)
        return admission

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
            await c.tx.clear_clarification(session_id)
            view = c.view
            if view.session.state not in PROMPTABLE or (
                view.cancelling or view.transitioning or view.approval_pending
            ):
                raise Conflict(ErrorCode.SESSION_BUSY, "the session cannot take the answer now")
            return await self.start_in(c, answer, MessageSource.USER, [])

    async def _on_end(self, runner: TurnRunner, ending: Ending) -> None:
        """Record a turn's end, retrying until it commits (Q10, M6). What the end means is
        decided once, under the session lock: C8 (pending wins) is read there, so no
        cancellation can be accepted between the decision and its commit.

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
        entry (Q4). Returns the drain's result and the end recorded. The caller holds the
        session lock.

        Hazard (M6): an instance declared dead while merely slow keeps running its turns until
        it learns so, and another instance's recovery may have ended one already (``FAILED``,
        interrupted; the database keeps the first end). Then that end is the turn's: it is what
        this instance publishes, and nothing of its own end (question, step change, drain)
        happens."""
        sid = runner.session_id
        drained: DrainResult | None = None
        # The lock row first (then turn, then session): recovery elsewhere cannot deadlock it.
        async with self.core.change(sid, session_lock=False) as c:
            ended_elsewhere = c.view.running_turn_id != runner.turn.id  # under the lock row
            if not ended_elsewhere:  # O1: the log's last batch, published before ``done``
                await runner.log.write_rest(c.tx)
            turn, session = await c.tx.end_turn(
                runner.turn.id,
                status=end.status,
                output=ending.output,
                error=end.error,
                error_kind=end.error_kind,
                agent_stderr=end.stderr,
            )
            output = ending.output
            if ended_elsewhere:  # ``end_turn`` changed nothing: the recorded end is the turn's
                end = TurnEnd(turn.status, turn.error, None, pending=True)  # drains nothing
                output = turn.output
            if end.question is not None:
                await c.tx.set_clarification(sid, turn_id=runner.turn.id, question=end.question)
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
