"""State shared by the engine's parts: the store, the bus, the runtime registries and locks.

One :class:`Core` per process. Hazards it owns:

- ``session_lock(sid)`` is an in-process ``asyncio.Lock`` per session. Every runtime decision about
  a session's turn — starting one, ending one, accepting a cancellation — is taken under it, so
  "is a turn running here?" and "is a cancellation pending?" cannot change between the check and
  the commit that acts on it. It is never held while waiting for an agent to stop. Across
  processes, the database lock row (Q3) is what serialises; this lock only orders one process's
  own tasks.
- Publications go through ``publish_after(tx, …)``, i.e. only after COMMIT.
- Every background task is started with ``spawn`` (named, owned, awaited at shutdown).
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any, TypeVar
from weakref import WeakValueDictionary

from turnqueue.agents import Agent
from turnqueue.bus import Event, EventBus, EventKind
from turnqueue.domain import (
    BUSY,
    PROMPTABLE,
    CancellationStatus,
    HoldReason,
    QueueStatus,
    Workflow,
)
from turnqueue.engine.cancellation import CancellationRegistry
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
        #: sessions whose task is changing step (hold WORKFLOW_TRANSITION, Q9)
        self.transitions: set[str] = set()
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
    def publish_after(self, tx: Tx, kind: EventKind, session_id: str, revision: int) -> None:
        event = Event(kind, session_id, revision)
        tx.after_commit(lambda: self.bus.publish(event))
        if self.cluster is not None:
            # Other instances hear it at COMMIT, in commit order (NOTIFY is transactional).
            tx.notify(self.cluster.durable_payload(kind, session_id, revision))

    async def queue_changed(self, tx: Tx, session_id: str) -> None:
        """The queue status changed in ``tx``: one revision (Q13), published after commit.

        R2: the same statement raises the session's durable cancellation floor to what this
        process knows (and reserves) and reads back what others stored: see ``cancellation``."""
        hint = self.cancellations.floor_hint(session_id)
        revision, floor = await tx.bump_queue(session_id, hint)
        self.cancellations.raise_floor(session_id, floor)
        self.holds_at.record(session_id, revision, tuple(self.runtime_holds(session_id)))
        self.publish_after(tx, EventKind.QUEUE, session_id, revision)

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

    # -- holds (Q9) ---------------------------------------------------------------------------
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

    def status_of(self, view: SessionView, entries: list[Any]) -> QueueStatus:
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
            async with self.store.transaction() as tx:
                await tx.lock(session_id)
                await self.queue_changed(tx, session_id)
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


def check_expected(view: SessionView, expected_revision: int | None) -> None:
    """Q13: a stale ``expectedRevision`` changes nothing."""
    if expected_revision is not None and expected_revision != view.policy.revision:
        raise Conflict(
            ErrorCode.QUEUE_CHANGED,
            f"queue revision is {view.policy.revision}, not {expected_revision}",
            ["expectedRevision"],
        )


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
