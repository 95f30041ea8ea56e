"""The engine's shared state (:class:`Core`: store, bus, runners, locks, tasks, holds) and
:meth:`Core.change`, which opens the unit of work every rule changes a session through
(``engine/unit_of_work.py``).

Hazards:
- ``session_lock(sid)`` is an in-process ``asyncio.Lock``. Every runtime decision about a
  session's turn (start, end, accepting a cancellation) is taken under it, so "is a turn running
  here?" and "is a cancellation pending?" cannot change between the check and the commit. It is
  never held while waiting for an agent to stop. Across processes the lock row serialises.
- ``hold`` and ``release_hold`` open a unit of work of their own: never call them
  inside one (units of work do not nest).
- Every background task is started with ``spawn`` (named, owned, awaited at shutdown).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Coroutine
from contextlib import AbstractAsyncContextManager, asynccontextmanager, nullcontext
from typing import TYPE_CHECKING, Any, TypeVar
from weakref import WeakValueDictionary

from turnqueue.agents import Agent
from turnqueue.bus import EventBus
from turnqueue.domain import (
    CancelKind,
    CancellationStatus,
    HoldReason,
    QueueStatus,
    Workflow,
)
from turnqueue.engine.cluster import OwnerGone
from turnqueue.engine.unit_of_work import Change, Outbox, Reference
from turnqueue.errors import Conflict, ErrorCode, UserFacingError
from turnqueue.settings import Settings
from turnqueue.store import Store

if TYPE_CHECKING:
    from turnqueue.engine.runner import TurnRunner

log = logging.getLogger(__name__)
T = TypeVar("T")


class Metrics:
    """What the engine reports to operators (U3; ``turnqueue.prometheus`` implements it). This
    class itself is the default observer: it does nothing (``NULL_METRICS``).

    Hazard: called in hot paths, sometimes under the session lock: every call must be
    synchronous, cheap and never raise."""

    def turn_started(self) -> None: ...

    def turn_ended(self, status: str) -> None: ...

    def reservation(self, kind: str, outcome: str) -> None:
        """``kind``: ``automatic`` or ``targeted`` (Q3); ``outcome``: started/paused/empty/held."""

    def cancel_done(self, outcome: str, seconds: float) -> None: ...


NULL_METRICS = Metrics()


class Core(Outbox):
    """The engine's shared state; the :class:`Outbox` its units of work publish through."""

    def __init__(
        self,
        settings: Settings,
        store: Store,
        bus: EventBus,
        agents: dict[str, Agent],
        workflow: Workflow,
        epoch: int,
    ) -> None:
        super().__init__(settings, bus, epoch)
        self.store = store
        self.agents = agents
        self.workflow = workflow
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
        async with self.change(session_id, session_lock=False) as c:
            await c.change_hold(reason, 1)
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

    async def queue_status(self, session_id: str) -> QueueStatus:
        async with self.store.read() as tx:
            view = await tx.view(session_id)
            if view is None:
                raise KeyError(session_id)
            entries = await tx.list_entries(session_id)
        return self.status_of(view, entries)
