"""The engine's shared state (:class:`Core`: store, bus, runners, locks, tasks, holds) and the
unit of work every rule changes a session through (:class:`Change`, opened by
:meth:`Core.change`): one rule's writes to a session in one transaction that holds its lock
row, and the events they imply, published after COMMIT (its shape: docs/architecture.md, "The
unit of work").

Hazards:
- ``session_lock(sid)`` is an in-process ``asyncio.Lock``. Every runtime decision about a
  session's turn (start, end, accepting a cancellation) is taken under it, so "is a turn running
  here?" and "is a cancellation pending?" cannot change between the check and the commit. It is
  never held while waiting for an agent to stop. Across processes the lock row serialises.
- Units of work do not nest: the store has one write transaction at a time (SQLite's writer
  lock), so a body never opens another (``hold``, ``add_hold`` and ``release_hold`` open one:
  call them outside). Two sessions changed together share one (:meth:`Change.join`).
- The status is read in the transaction that bumped its revision, after the body's last change:
  exactly the state of that revision (Q13), holds included (they are rows).
- The session event is published last, after the transaction's other events: subscribers read
  the session again on it, so they see the committed state.
- The session revision is the store's, never inferred: every write that moves it answers the
  revision it reached (``Tx.session_revision``), and the lock row keeps every other writer
  out. A write through ``c.tx`` the rule did not report is announced at the end all the same.
- Every background task is started with ``spawn`` (named, owned, awaited at shutdown).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import AbstractAsyncContextManager, asynccontextmanager, nullcontext
from typing import TYPE_CHECKING, Any, Protocol, TypeVar
from weakref import WeakValueDictionary

from turnqueue.agents import Agent
from turnqueue.bus import Event, EventBus, EventKind
from turnqueue.domain import (
    BUSY,
    PROMPTABLE,
    CancelKind,
    CancellationStatus,
    HoldReason,
    PauseReason,
    QueueEntry,
    QueueStatus,
    Workflow,
)
from turnqueue.engine.cluster import Cluster, OwnerGone
from turnqueue.errors import Conflict, ErrorCode, UserFacingError
from turnqueue.settings import Settings
from turnqueue.store import SessionView, Store, Tx

if TYPE_CHECKING:
    from turnqueue.engine.runner import TurnRunner

log = logging.getLogger(__name__)
T = TypeVar("T")


class Metrics(Protocol):
    """What the engine reports to operators (U3; ``turnqueue.prometheus`` implements it).

    Hazard: called in hot paths, sometimes under the session lock: every call must be
    synchronous, cheap and never raise."""

    def turn_started(self) -> None: ...

    def turn_ended(self, status: str) -> None: ...

    def reservation(self, kind: str, outcome: str) -> None:
        """``kind``: ``automatic`` or ``targeted`` (Q3); ``outcome``: started/paused/empty/held."""

    def cancel_done(self, outcome: str, seconds: float) -> None: ...


class NullMetrics:
    """The default observer: does nothing."""

    def turn_started(self) -> None: ...

    def turn_ended(self, status: str) -> None: ...

    def reservation(self, kind: str, outcome: str) -> None: ...

    def cancel_done(self, outcome: str, seconds: float) -> None: ...


NULL_METRICS = NullMetrics()


def publish_after(
    core: Core,
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
        core.bus.publish(Event(kind, session_id, revision, cancellation, queue=status))

    tx.after_commit(publish)
    if core.cluster is not None:
        # Other instances hear it at COMMIT, in commit order (NOTIFY is transactional).
        pending = cancellation.pending if cancellation is not None else None
        tx.notify(core.cluster.durable_payload(kind, session_id, revision, pending))


class Change:
    """One session's changes inside one transaction that holds its lock row."""

    def __init__(self, core: Core, tx: Tx, view: SessionView, *, status: bool = False) -> None:
        self._core = core
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
            publish_after(
                self._core, self.tx, EventKind.QUEUE, self.session_id, revision, lambda: self.status
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
        held = await self.tx.change_hold(self.session_id, self._core.instance, kind, delta)
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
        published after COMMIT, in commit order; anything else is no transition."""
        if pending == self.cancelling:
            return
        self.cancelling = pending
        revision = await self.tx.bump_cancellation(self.session_id)
        status = CancellationStatus(self.session_id, pending, revision)
        kind = EventKind.CANCELLATION
        publish_after(self._core, self.tx, kind, self.session_id, revision, cancellation=status)

    async def join(self, session_id: str) -> Change:
        """Another session changed in this same transaction (W3's destination): its lock row
        is taken now (after this one's: lock rows in the order the rule names them), and its
        publications follow this one's."""
        joined = Change(self._core, self.tx, await self.tx.lock(session_id))
        self._joined.append(joined)
        return joined

    def on_commit(self, callback: Callable[[], object]) -> None:
        """Run ``callback`` once the transaction has committed and its events are published,
        still under the session lock (a rolled-back change runs none)."""
        self._on_commit.append(callback)

    async def before_commit(self) -> None:
        """The end of the body (``Core.change`` calls it, in the transaction): the queue
        revisions still owed (Q13: whether or not the rule asked), the statuses read, the
        session events registered."""
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
                publish_after(self._core, self.tx, EventKind.QUEUE, session_id, revision)
            elif unit.queue_revision is None:
                await unit.queue_changed()
        watched = self._core.bus.watched
        for change in (self, *self._joined):
            sid = change.session_id
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
                    change.status = self._core.status_of(view, entries, bumped)
            if change._session_changed:
                revision = change.session_revision
                publish_after(self._core, self.tx, EventKind.SESSION, sid, revision)

    def committed(self) -> None:
        """The transaction committed and its events are published (``Core.change`` calls it):
        the :meth:`on_commit` call-backs run, this unit's first, then the joined ones'."""
        for unit in (self, *self._joined):
            for callback in unit._on_commit:
                callback()


class Core:
    def __init__(
        self,
        settings: Settings,
        store: Store,
        bus: EventBus,
        agents: dict[str, Agent],
        workflow: Workflow,
        epoch: int,
    ) -> None:
        self.settings = settings
        self.store = store
        self.bus = bus
        self.agents = agents
        self.workflow = workflow
        #: this process's instance id (its epoch, R2): the owner recorded on the turns it runs
        #: and the holds it takes (M4)
        self.instance = epoch
        #: set when several processes share the database (PostgreSQL; engine/cluster.py)
        self.cluster: Cluster | None = None
        self.runners: dict[str, TurnRunner] = {}
        self._locks: WeakValueDictionary[str, asyncio.Lock] = WeakValueDictionary()
        self._tasks: set[asyncio.Task[Any]] = set()
        self.closing = False
        #: operations observer; a no-op unless the app sets one (``Engine.observe``)
        self.metrics: Metrics = NULL_METRICS

    def session_lock(self, session_id: str) -> asyncio.Lock:
        lock = self._locks.get(session_id)
        if lock is None:
            lock = asyncio.Lock()
            self._locks[session_id] = lock
        return lock

    def spawn(self, coro: Coroutine[Any, Any, T], name: str) -> asyncio.Task[T]:
        task = asyncio.create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if task.cancelled():
            return
        error = task.exception()
        if error is not None and not isinstance(error, UserFacingError):
            log.error("background task %s failed", task.get_name(), exc_info=error)

    async def drain_tasks(self, timeout: float) -> None:
        """Shutdown: wait for background work, then cancel what is left."""
        if self._tasks:
            _, pending = await asyncio.wait(set(self._tasks), timeout=timeout)
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.wait(pending, timeout=timeout)

    async def cancellation(self, session_id: str) -> CancellationStatus:
        """C1, C2, C6: the session's cancellation status as the rows say (every instance reads
        the same), pending and its revision from one read; (false, 0) for no such session."""
        async with self.store.read() as tx:
            view = await tx.view(session_id)
        if view is None:
            return CancellationStatus(session_id, False, 0)
        return CancellationStatus(session_id, view.cancelling, view.cancel_revision)

    async def ask_owner(
        self, session_id: str, op: str, args: dict[str, Any], timeout: float
    ) -> dict[str, Any] | None:
        """M4: run ``op`` on the live instance running the session's turn when that is another
        one (only it can stop or answer its agent) and answer its result; None when it is for
        this instance to run: no other live owner, or one that died before taking the request
        (``OwnerGone``: the request was withdrawn). ``OwnerUnreachable`` when it did not answer
        in time."""
        if self.cluster is None or session_id in self.runners:
            return None
        async with self.store.read() as tx:
            view = await tx.view(session_id)
        owner = view.running_turn_owner if view is not None else None
        if owner is None or owner == self.instance or owner not in await self.cluster.live():
            return None
        try:
            return await self.cluster.call(owner, op, args, timeout)
        except OwnerGone:
            log.warning("owner %s of session %s is gone; %s runs here", owner, session_id, op)
            return None

    @asynccontextmanager
    async def change(
        self,
        session_id: str,
        expected_revision: int | None = None,
        *,
        session_lock: bool = True,
        status: bool = False,
    ) -> AsyncIterator[Change]:
        """One rule's unit of work on one session: the session lock (``session_lock=False``
        when the caller holds it, or the rule decides nothing about the session's turn), a
        transaction, the lock row first in it (Q3: one lock order everywhere), then the
        ``expectedRevision`` check (Q13: a stale one raises QUEUE_CHANGED, changing nothing).
        ``status``: read the queue status at the end of the body (``c.status``), in its
        transaction: what a mutation answers, changed or not."""
        lock: AbstractAsyncContextManager[object] = (
            self.session_lock(session_id) if session_lock else nullcontext()
        )
        async with lock:
            async with self.store.transaction() as tx:
                c = Change(self, tx, await tx.lock(session_id), status=status)
                revision = c.view.policy.revision
                if expected_revision is not None and expected_revision != revision:  # Q13
                    raise Conflict(
                        ErrorCode.QUEUE_CHANGED,
                        f"queue revision is {revision}, not {expected_revision}",
                        ["expectedRevision"],
                    )
                yield c
                await c.before_commit()
            c.committed()

    @asynccontextmanager
    async def hold(self, session_id: str, kind: CancelKind | None = None) -> AsyncIterator[None]:
        """A runtime hold for the block (Q9), committed before it and released after it, on
        every exit: CANCELLING, a cancellation reference of ``kind`` (C1, C5: ``kind`` names it
        at the call site), or WORKFLOW_TRANSITION when ``kind`` is None. If the hold cannot be
        written, nothing is held and the error is raised."""
        reason = HoldReason.WORKFLOW_TRANSITION if kind is None else HoldReason.CANCELLING
        await self.add_hold(session_id, reason)
        try:
            yield
        finally:
            await self.release_hold(session_id, reason)

    @asynccontextmanager
    async def reference(self, session_id: str, reason: HoldReason) -> AsyncIterator[Reference]:
        """A hold the block's units of work take and end themselves (:class:`Reference`), so
        each commits with the rule's own changes; one still held when the block exits is
        released then (C5), whatever ended the block."""
        reference = Reference(reason)
        try:
            yield reference
        finally:
            if reference.held:
                await self.release_hold(session_id, reason)

    async def add_hold(self, session_id: str, reason: HoldReason) -> None:
        """One more hold of ``reason`` by this instance, committed now (Q9, Q13)."""
        async with self.change(session_id, session_lock=False) as c:
            await c.change_hold(reason, 1)

    async def release_hold(self, session_id: str, reason: HoldReason) -> None:
        """One hold of ``reason`` by this instance ends (C5: on every exit).

        Hazard: a release that cannot commit (the database away) would hold the queue for
        good, so it is retried in the background until it does; at shutdown it is left to
        recovery, which deletes a dead instance's holds (M6)."""
        try:
            await self._release_hold(session_id, reason)
        except Exception:
            log.exception("could not release the %s hold of session %s", reason, session_id)
            self.spawn(self._retry_release(session_id, reason), f"release:{session_id}")

    async def _release_hold(self, session_id: str, reason: HoldReason) -> None:
        async with self.change(session_id, session_lock=False) as c:
            await c.change_hold(reason, -1)

    async def _retry_release(self, session_id: str, reason: HoldReason) -> None:
        delay = 0.05
        while not self.closing:
            await asyncio.sleep(delay)
            try:
                await self._release_hold(session_id, reason)
                return
            except Exception:
                delay = min(delay * 2, 2.0)

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

    async def queue_status(self, session_id: str) -> QueueStatus:
        async with self.store.read() as tx:
            view = await tx.view(session_id)
            if view is None:
                raise KeyError(session_id)
            entries = await tx.list_entries(session_id)
        return self.status_of(view, entries)


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
