"""State shared by the engine's parts: the store, the bus, the runtime registries and locks.

One :class:`Core` per process. Hazards it owns:

- ``session_lock(sid)`` is an in-process ``asyncio.Lock`` per session. Every runtime decision about
  a session's turn — starting one, ending one, accepting a cancellation — is taken under it, so
  "is a turn running here?" and "is a cancellation pending?" cannot change between the check and
  the commit that acts on it. It is never held while waiting for an agent to stop. Across
  processes, the database lock row (Q3) is what serialises; this lock only orders one process's
  own tasks.
- Every rule changes a session through one unit of work, ``change(sid, expected_revision)``
  (``engine/change.py``): the session lock, the transaction, the lock row, the Q13 check, one
  queue revision, and publications and launches only after COMMIT (``publish_after``).
- A runtime hold (CANCELLING, WORKFLOW_TRANSITION) is held by ``hold(sid, kind)``, which bumps
  the queue revision when it starts and ends and releases it on every exit.
- Every background task is started with ``spawn`` (named, owned, awaited at shutdown).
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter, OrderedDict
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import AbstractAsyncContextManager, ExitStack, asynccontextmanager
from typing import TYPE_CHECKING, Any, TypeVar
from weakref import WeakValueDictionary

from turnqueue.agents import Agent
from turnqueue.bus import Event, EventBus, EventKind
from turnqueue.domain import (
    BUSY,
    PROMPTABLE,
    CancelKind,
    CancellationStatus,
    HoldReason,
    QueueEntry,
    QueueStatus,
    Workflow,
)
from turnqueue.engine.cancellation import CancellationRegistry
from turnqueue.engine.change import Change, change
from turnqueue.engine.peers import Peers
from turnqueue.engine.stats import NULL_METRICS, Metrics
from turnqueue.errors import Conflict, ErrorCode, InvalidInput, UserFacingError
from turnqueue.settings import Settings
from turnqueue.store import SessionView, Store, Tx

if TYPE_CHECKING:
    from turnqueue.engine.runner import TurnRunner

log = logging.getLogger(__name__)
T = TypeVar("T")


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
        self.cancellations = CancellationRegistry(epoch, self._on_cancellation_transition)
        #: this process's instance id (its epoch): the owner recorded on the turns it runs (M4)
        self.instance = epoch
        #: set when several processes share the database (PostgreSQL; engine/cluster.py)
        self.cluster: Peers | None = None
        self.runners: dict[str, TurnRunner] = {}
        #: sessions whose task is changing step, with how many step changes hold each (hold
        #: WORKFLOW_TRANSITION, Q9): a reference count, so one change ending never releases
        #: another's hold (a manual move while a completion's move is pending)
        self.transitions: Counter[str] = Counter()
        #: sessions with an approval waiting for its answer (hold APPROVAL, A6; approvals.py)
        self.approval_holds: set[str] = set()
        self._locks: WeakValueDictionary[str, asyncio.Lock] = WeakValueDictionary()
        self._tasks: set[asyncio.Task[Any]] = set()
        self.closing = False
        #: the runtime holds each recent queue revision was bumped with (see ``holds``)
        self.holds_at = HoldsAt()
        #: operations observer (engine/stats.py); a no-op unless the app sets one
        self.metrics: Metrics = NULL_METRICS

    # -- locks and tasks ---------------------------------------------------------------------
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

    # -- publication (after commit only) ----------------------------------------------------
    def publish_after(
        self,
        tx: Tx,
        kind: EventKind,
        session_id: str,
        revision: int,
        queue: Callable[[], QueueStatus | None] | None = None,
    ) -> None:
        """Publish after COMMIT; ``queue``: the status the transaction read before it (the
        unit of work's, read after this call), carried by a QUEUE event of that revision."""

        def publish() -> None:
            status = queue() if queue is not None else None
            if status is not None and status.revision != revision:
                status = None  # not this revision's state: subscribers read their own
            self.bus.publish(Event(kind, session_id, revision, queue=status))

        tx.after_commit(publish)
        if self.cluster is not None:
            # Other instances hear it at COMMIT, in commit order (NOTIFY is transactional).
            tx.notify(self.cluster.durable_payload(kind, session_id, revision))

    async def bump_queue(self, tx: Tx, session_id: str) -> int:
        """The queue revision of ``tx`` (bumped once per transaction by the store, Q13), the
        cancellation floor raised with it (R2) and the runtime holds recorded with it (Q9).

        R2: the same statement raises the session's durable cancellation floor to what this
        process knows (and reserves) and reads back what others stored: see ``cancellation``.
        Rules call it through their unit of work (``Change.queue_changed``)."""
        hint = self.cancellations.floor_hint(session_id)
        revision, floor = await tx.bump_queue(session_id, hint)
        self.cancellations.raise_floor(session_id, floor)
        self.holds_at.record(session_id, revision, tuple(self.runtime_holds(session_id)))
        return revision

    def _on_cancellation_transition(self, status: CancellationStatus) -> None:
        # Runs inside the registry's critical section: synchronous, in transition order.
        self.bus.publish(Event(EventKind.CANCELLATION, status.session_id, status.revision, status))

    async def remote_owner(self, session_id: str) -> int | None:
        """The live instance running this session's turn, when that is not this one (M4)."""
        if self.cluster is None or session_id in self.runners:
            return None
        async with self.store.read() as tx:
            view = await tx.view(session_id)
        owner = view.running_turn_owner if view is not None else None
        if owner is None or owner == self.instance:
            return None
        return owner if owner in await self.cluster.live() else None

    # -- the unit of work and runtime holds ----------------------------------------------------
    def change(
        self, session_id: str, expected_revision: int | None = None, *, session_lock: bool = True
    ) -> AbstractAsyncContextManager[Change]:
        """One rule's unit of work on one session (``engine/change.py``): the session lock
        (``session_lock=False``: the caller holds it, or the rule decides nothing about the
        session's turn), a transaction, the lock row, the Q13 check, one queue revision, and
        events and launches after COMMIT only."""
        return change(self, session_id, expected_revision, session_lock=session_lock)

    @asynccontextmanager
    async def hold(self, session_id: str, kind: CancelKind | None = None) -> AsyncIterator[None]:
        """A runtime hold for the block (Q9): CANCELLING by a cancellation reference of ``kind``
        (C5), or WORKFLOW_TRANSITION when ``kind`` is None. The queue revision is bumped when it
        starts and again when it ends (Q13: each ``heldBy`` comes with a revision of its own);
        it is released on every exit."""
        with ExitStack() as stack:
            if kind is None:
                self.begin_transition(session_id)
                stack.callback(self.end_transition, session_id)
            else:
                stack.enter_context(self.cancellations.reference(session_id, kind))
            try:
                await self.touch_queue(session_id)
                yield
            finally:
                stack.close()  # released first: the bump below carries the new heldBy
                await self.touch_queue(session_id)

    # -- holds (Q9) ---------------------------------------------------------------------------
    def begin_transition(self, session_id: str) -> None:
        """A step change holds the session's queue (WORKFLOW_TRANSITION) until it ends."""
        self.transitions[session_id] += 1

    def end_transition(self, session_id: str) -> bool:
        """One step change's hold ends; True when it was the last (the hold is released)."""
        left = self.transitions[session_id] - 1
        if left > 0:
            self.transitions[session_id] = left
            return False
        self.transitions.pop(session_id, None)
        return True

    async def release_transition(self, session_id: str) -> None:
        """End a step change's hold handed over by ``begin_transition`` (W1, W2), with a
        revision of its own when it was the last one (Q13).

        Hazard: a step change that holds the session itself (``hold``) bumps the revision
        when its block ends, but under a handed hold that bump still records
        WORKFLOW_TRANSITION; without this second bump the last revision would serve that
        hold for good (a transferred session's final revision, W3)."""
        if self.end_transition(session_id):
            await self.touch_queue(session_id)

    def runtime_holds(self, session_id: str) -> list[HoldReason]:
        holds = []
        if self.cancellations.pending(session_id):
            holds.append(HoldReason.CANCELLING)
        if session_id in self.transitions:
            holds.append(HoldReason.WORKFLOW_TRANSITION)
        if session_id in self.approval_holds:
            holds.append(HoldReason.APPROVAL)
        return holds

    def holds(self, view: SessionView) -> tuple[HoldReason, ...]:
        """The holds served with ``view``'s queue revision (Q9, Q13).

        Hazard: a runtime hold (CANCELLING, WORKFLOW_TRANSITION) changes in memory a moment
        before the transaction that bumps the queue revision for it commits. Read live, a
        status read in between would serve the old revision with the new hold — one revision,
        two ``heldBy``s. So the runtime holds served with a revision are those recorded when
        that revision was bumped; only a revision this process did not bump (another instance,
        or before a restart) is served with the live ones."""
        sid = view.session.id
        holds: list[HoldReason] = []
        runner = self.runners.get(sid)
        if view.session.state in BUSY or (runner is not None and not runner.ending):
            holds.append(HoldReason.BUSY)
        elif view.session.state not in PROMPTABLE:
            holds.append(HoldReason.NOT_PROMPTABLE)
        if view.clarification is not None:
            holds.append(HoldReason.CLARIFICATION)
        recorded = self.holds_at.get(sid, view.policy.revision)
        holds.extend(recorded if recorded is not None else self.runtime_holds(sid))
        return tuple(holds)

    async def queue_status(self, session_id: str) -> QueueStatus:
        async with self.store.read() as tx:
            view = await tx.view(session_id)
            if view is None:
                raise KeyError(session_id)
            entries = await tx.list_entries(session_id)
        return self.status_of(view, entries)

    def watched(self, session_id: str) -> bool:
        """Whether a subscriber here watches the session's queue (its event then carries the
        status, read in the transaction: ``Change.want_status``)."""
        return self.bus.watched(session_id, EventKind.QUEUE)

    def status_of(self, view: SessionView, entries: list[QueueEntry]) -> QueueStatus:
        return QueueStatus(
            session_id=view.session.id,
            auto_run=view.policy.auto_run,
            pause_reason=view.policy.pause_reason,
            held_by=self.holds(view),
            entries=tuple(entries),
            max=self.settings.queue_limit,
            revision=view.policy.revision,
        )

    async def touch_queue(self, session_id: str) -> None:
        """Bump the queue revision because a runtime hold changed (Q13) and publish it."""
        try:
            async with self.change(session_id, session_lock=False) as c:
                await c.queue_changed()
        except Exception:
            # A missed bump would leave heldBy stale; tell subscribers to resync instead.
            log.exception("could not record a hold change of session %s", session_id)
            self.holds_at.forget(session_id)
            self.bus.publish(Event(EventKind.RESYNC, session_id))


class HoldsAt:
    """The runtime holds recorded with the last few queue revisions of each session, for the
    most recently changed sessions (bounded: a miss falls back to the live holds)."""

    PER_SESSION = 8
    SESSIONS = 65_536

    def __init__(self) -> None:
        self._by_session: OrderedDict[str, dict[int, tuple[HoldReason, ...]]] = OrderedDict()

    def record(self, session_id: str, revision: int, holds: tuple[HoldReason, ...]) -> None:
        recent = self._by_session.pop(session_id, None) or {}
        recent[revision] = holds  # a rolled-back revision is simply recorded again
        while len(recent) > self.PER_SESSION:
            del recent[min(recent)]
        self._by_session[session_id] = recent
        while len(self._by_session) > self.SESSIONS:
            self._by_session.popitem(last=False)

    def forget(self, session_id: str | None = None) -> None:
        """Serve the live holds from now on (one session, or all after a missed NOTIFY)."""
        if session_id is None:
            self._by_session.clear()
        else:
            self._by_session.pop(session_id, None)

    def get(self, session_id: str, revision: int) -> tuple[HoldReason, ...] | None:
        recent = self._by_session.get(session_id)
        return recent.get(revision) if recent is not None else None


def check_content(content: str, limit: int, field: str = "content") -> str:
    """S3: content must be non-blank and at most ``limit`` bytes of UTF-8."""
    if not content.strip():
        raise InvalidInput(f"{field} must not be empty", [field])
    if "\x00" in content:  # PostgreSQL text cannot hold it: refused alike on both stores (M3)
        raise InvalidInput(f"{field} must not contain NUL characters", [field])
    size = len(content.encode("utf-8", "surrogatepass"))
    if size > limit:
        raise InvalidInput(f"{field} is {size} bytes; the limit is {limit}", [field])
    return content


def check_capacity(view: SessionView, limit: int | None, adding: int = 1) -> None:
    """Q11: at most ``queue_max`` visible entries."""
    if limit is not None and view.queued + adding > limit:
        raise Conflict(
            ErrorCode.QUEUE_FULL,
            f"the queue is full: it holds {view.queued} of at most {limit} entries",
        )
