"""The unit of work every rule changes a session through (:class:`Change`, opened by
:meth:`~turnqueue.engine.core.Core.change`): one rule's writes to a session in one transaction
that holds its lock row, and the events they imply, published after COMMIT by the
:class:`Outbox` (its shape: docs/architecture.md, "The unit of work").

Hazards:
- Units of work do not nest: the store has one write transaction at a time (SQLite's writer
  lock), so a body never opens another (``Core.hold`` and ``release_hold`` open one: call
  them outside). Two sessions changed together share one (:meth:`Change.join`).
- The status is read in the transaction that bumped its revision, after the body's last change:
  exactly the state of that revision (Q13), holds included (they are rows).
- The events leave in one order: queue events first, then cancellation transitions (C2, in
  transition order), the session event last: subscribers read the session again on it, so they
  see the committed state.
- The session revision is the store's, never inferred: every write that moves it answers the
  revision it reached (``Tx.session_revision``), and the lock row keeps every other writer
  out. A write through ``c.tx`` the rule did not report is announced at the end all the same.
"""

from __future__ import annotations

from collections.abc import Callable

from turnqueue.bus import Event, EventBus, EventKind
from turnqueue.domain import (
    BUSY,
    PROMPTABLE,
    CancellationStatus,
    HoldReason,
    PauseReason,
    QueueEntry,
    QueueStatus,
)
from turnqueue.engine.cluster import Cluster
from turnqueue.errors import Conflict, ErrorCode
from turnqueue.settings import Settings
from turnqueue.store import SessionView, Tx


class Outbox:
    """Where a unit of work's events leave, after its COMMIT: this instance's bus, and the
    other instances through NOTIFY at the COMMIT itself; with what a unit of work writes as this
    instance (its id, the owner of the holds it takes) and the status it reads. The engine's
    :class:`~turnqueue.engine.core.Core` is one."""

    def __init__(self, settings: Settings, bus: EventBus, epoch: int) -> None:
        self.settings = settings
        self.bus = bus
        #: this process's instance id (its epoch, R2): the owner recorded on the turns it runs
        #: and the holds it takes (M4)
        self.instance = epoch
        #: set when several processes share the database (PostgreSQL; engine/cluster.py)
        self.cluster: Cluster | None = None

    def publish_after(
        self,
        tx: Tx,
        kind: EventKind,
        session_id: str,
        revision: int,
        queue: Callable[[], QueueStatus | None] | None = None,
        cancellation: CancellationStatus | None = None,
    ) -> None:
        """Publish after COMMIT (and NOTIFY the other instances at it); ``queue``: the status the
        transaction read, carried by a QUEUE event of that revision; ``cancellation``: a
        CANCELLATION event's status (C2)."""

        def publish() -> None:
            status = queue() if queue is not None else None
            if status is not None and status.revision != revision:
                status = None  # not this revision's state: subscribers read their own
            self.bus.publish(Event(kind, session_id, revision, cancellation, queue=status))

        tx.after_commit(publish)
        if self.cluster is not None:
            # Other instances hear it at COMMIT, in commit order (NOTIFY is transactional).
            pending = cancellation.pending if cancellation is not None else None
            tx.notify(self.cluster.durable_payload(kind, session_id, revision, pending))

    def status_of(
        self, view: SessionView, entries: list[QueueEntry], revision: int | None = None
    ) -> QueueStatus:
        """The queue status ``view`` and ``entries`` show; at ``revision`` when given (the
        unit of work's bump, newer than the view's)."""
        return QueueStatus(
            session_id=view.session.id,
            auto_run=view.policy.auto_run,
            pause_reason=view.policy.pause_reason,
            held_by=held_by(view),
            entries=tuple(entries),
            max=self.settings.queue_limit,
            revision=view.policy.revision if revision is None else revision,
        )


class Change:
    """One session's changes inside one transaction that holds its lock row."""

    def __init__(self, outbox: Outbox, tx: Tx, view: SessionView, *, status: bool = False) -> None:
        self._outbox = outbox
        self.tx = tx
        #: the session as the lock row found it (rules may keep a derived view of their own)
        self.view = view
        self.session_id = view.session.id
        #: the session revision this transaction has reached (the store's)
        self.session_revision = view.session.revision
        #: the queue revision this transaction bumped to, once it has
        self.queue_revision: int | None = None
        #: the queue status at the end of the body, when it was read (``status=True``)
        self.status: QueueStatus | None = None
        self._status_wanted = status
        self._view_now: SessionView | None = None
        self._session_changed = False
        self._joined: list[Change] = []
        self._on_commit: list[Callable[[], object]] = []
        self._transitions: list[CancellationStatus] = []
        #: C1: whether the session is cancellation-pending as this transaction leaves it
        self.cancelling = view.cancelling

    async def queue_changed(self) -> int:
        """The queue status changed: one revision per transaction (Q13), published after
        commit. Every write the store reports (``Tx.changed_queues``) gets it at the end of the
        body anyway; a rule calls it to bump now."""
        revision = await self.tx.bump_queue(self.session_id)
        self._queue_bumped(revision)
        return revision

    async def set_policy(self, *, auto_run: bool, pause_reason: PauseReason | None) -> None:
        """Q1, Q14: write the policy; the queue status changed (:meth:`queue_changed`), and
        both go in one statement where the store can (PostgreSQL)."""
        if self.queue_revision is not None:
            await self.tx.set_policy(self.session_id, auto_run=auto_run, pause_reason=pause_reason)
            return
        revision = await self.tx.set_policy_bumped(
            self.session_id, auto_run=auto_run, pause_reason=pause_reason
        )
        self._queue_bumped(revision)

    def _queue_bumped(self, revision: int) -> None:
        if self.queue_revision is None:
            self.queue_revision = revision
            self._outbox.publish_after(
                self.tx, EventKind.QUEUE, self.session_id, revision, lambda: self.status
            )

    def view_now(self, view: SessionView) -> None:
        """The rule vouches that ``view`` is the session as this transaction leaves it, its
        queue revision aside: the status at the end then reads only the entries.

        Hazard: call it after the body's last write. A hold, or a write that moves the session
        revision, forgets it; any other write after it would answer a stale status."""
        self._view_now = view

    def session_changed(self) -> None:
        """A session event is owed (published at the end, with the revision reached). Every
        write through ``c.tx`` that moves the session revision owes one without being said."""
        reached = self.tx.session_revision(self.session_id)
        if reached is not None:
            self.session_revision = reached
        self._session_changed = True
        self._view_now = None

    async def change_hold(self, kind: HoldReason, delta: int) -> None:
        """``delta`` more (or fewer) holds of ``kind`` by this instance; a CANCELLING hold
        that makes the session pending, or the release that clears it, is a transition."""
        self._view_now = None
        held = await self.tx.change_hold(self.session_id, self._outbox.instance, kind, delta)
        if kind is HoldReason.CANCELLING:
            await self._cancelling_is(held)

    async def drop_orphaned_holds(self, live: set[int]) -> None:
        """M6: the holds of instances not in ``live`` end (C5: the owner dying releases its
        references)."""
        self._view_now = None
        if await self.tx.drop_orphaned_holds(self.session_id, live):
            view = await self.tx.view(self.session_id)
            await self._cancelling_is(view is not None and view.cancelling)

    async def _cancelling_is(self, pending: bool) -> None:
        """C2: a transition of the pending flag gets its revision in this transaction and is
        published after COMMIT (:meth:`before_commit`); anything else is no transition."""
        if pending == self.cancelling:
            return
        self.cancelling = pending
        revision = await self.tx.bump_cancellation(self.session_id)
        self._transitions.append(CancellationStatus(self.session_id, pending, revision))

    async def join(self, session_id: str) -> Change:
        """Another session changed in this same transaction (W3's destination): its lock row
        is taken now (after this one's: lock rows in the order the rule names them), and its
        publications follow this one's."""
        joined = Change(self._outbox, self.tx, await self.tx.lock(session_id))
        self._joined.append(joined)
        return joined

    def on_commit(self, callback: Callable[[], object]) -> None:
        """Run ``callback`` once the transaction has committed and its events are published,
        still under the session lock (a rolled-back change runs none)."""
        self._on_commit.append(callback)

    async def before_commit(self) -> None:
        """The end of the body (``Core.change`` calls it, in the transaction): the queue
        revisions still owed (Q13: whether or not the rule asked), the statuses read, the
        cancellation transitions and session events registered (after the queue events)."""
        units = {change.session_id: change for change in (self, *self._joined)}
        for each in units.values():
            reached = self.tx.session_revision(each.session_id)
            if reached is not None and (
                reached != each.session_revision or not each._session_changed
            ):
                each.session_changed()  # a write through ``tx`` that the rule did not say
        for session_id in self.tx.changed_queues():
            unit = units.get(session_id)
            if unit is None:
                revision = await self.tx.bump_queue(session_id)
                self._outbox.publish_after(self.tx, EventKind.QUEUE, session_id, revision)
            elif unit.queue_revision is None:
                await unit.queue_changed()
        watched = self._outbox.bus.watched
        for change in (self, *self._joined):
            sid = change.session_id
            for status in change._transitions:
                kind, revision = EventKind.CANCELLATION, status.revision
                self._outbox.publish_after(self.tx, kind, sid, revision, cancellation=status)
            if change._status_wanted or (
                change.queue_revision is not None and watched(sid, EventKind.QUEUE)
            ):
                view, bumped = change._view_now, change.queue_revision
                if view is None:
                    view, bumped = await self.tx.view(sid), None
                if view is not None:
                    # ``queued`` counts the visible entries, kept by the store in the same
                    # statement as every change to them: none queued reads none.
                    entries = await self.tx.list_entries(sid) if view.queued else []
                    change.status = self._outbox.status_of(view, entries, bumped)
            if change._session_changed:
                revision = change.session_revision
                self._outbox.publish_after(self.tx, EventKind.SESSION, sid, revision)

    def committed(self) -> None:
        """The transaction committed and its events are published (``Core.change`` calls it):
        the :meth:`on_commit` call-backs run, this unit's first, then the joined ones'."""
        for unit in (self, *self._joined):
            for callback in unit._on_commit:
                callback()


class Reference:
    """A runtime hold that one unit of work takes (:meth:`take_in`) and a later one ends
    (:meth:`end_in`); ``held`` follows the commits."""

    __slots__ = ("held", "reason")

    def __init__(self, reason: HoldReason) -> None:
        self.reason = reason
        self.held = False  # as the last committed take or end left it

    async def take_in(self, c: Change) -> None:
        await c.change_hold(self.reason, 1)
        c.tx.after_commit(lambda: self._committed(True))

    async def end_in(self, c: Change) -> None:
        await c.change_hold(self.reason, -1)
        c.tx.after_commit(lambda: self._committed(False))

    def _committed(self, held: bool) -> None:
        self.held = held


def held_by(view: SessionView) -> tuple[HoldReason, ...]:
    """What holds the queue (Q9), from the rows of one revision alone (R3: every instance
    serves one revision with one ``heldBy``)."""
    holds: list[HoldReason] = []
    if view.session.state in BUSY:
        holds.append(HoldReason.BUSY)
    elif view.session.state not in PROMPTABLE:
        holds.append(HoldReason.NOT_PROMPTABLE)
    if view.clarification is not None:
        holds.append(HoldReason.CLARIFICATION)
    if view.cancelling:
        holds.append(HoldReason.CANCELLING)
    if view.transitioning:
        holds.append(HoldReason.WORKFLOW_TRANSITION)
    if view.approval_pending:
        holds.append(HoldReason.APPROVAL)
    return tuple(holds)


def check_capacity(view: SessionView, limit: int | None) -> None:
    """Q11: at most ``queue_max`` visible entries."""
    if limit is not None and view.queued >= limit:
        raise Conflict(
            ErrorCode.QUEUE_FULL,
            f"the queue is full: it holds {view.queued} of at most {limit} entries",
        )
