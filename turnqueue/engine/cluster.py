"""Several server processes on one PostgreSQL database (M4): each process is an *instance*,
identified by its epoch (R2), with a row in ``instances`` that it heartbeats; the instance that
started a session's running turn *owns* it (only it can stop its agent).

Messages travel on one NOTIFY channel (their format: ``engine/wire.py``): ``ev``, an event for
subscribers (a durable change's is sent inside its transaction, so it is delivered on COMMIT in
commit order; runtime events go through one ordered outbox; a receiver publishes them marked
``relayed``), and ``cmd`` / ``re``, which only wake the two sides of a request row
(``owner_requests``, :meth:`Cluster.call`). A batch that cannot be sent is sent one by one, so
one notification that cannot be sent (logged) never takes the others with it. A LISTEN outage
loses only events: subscribers are told to resync (``_on_resync``) and read again (C7: the
cancellation projection is rows every instance reads).

Hazard: a process may be declared dead while merely slow. It learns so at its next heartbeat
(its row is gone) and abandons its turns, whose ends the adopter has already recorded.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass
from typing import Any

from turnqueue.bus import Event, EventBus, EventKind
from turnqueue.domain import RequestState
from turnqueue.engine.wire import (
    message,
    origin_prefix,
    outcome,
    refusal,
    relayed_event,
    runtime_fields,
)
from turnqueue.errors import ErrorCode, UserFacingError
from turnqueue.store import Store
from turnqueue.timeouts import within

log = logging.getLogger(__name__)

#: How often a requester reads its request again while no answer woke it (a lost NOTIFY).
POLL_SECONDS = 0.5


#: a forwarded operation served for another instance: its arguments in, its result out
Handler = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]
#: ``Core.spawn``: start a named background task the engine owns (awaited at shutdown)
Spawn = Callable[[Coroutine[Any, Any, None], str], "asyncio.Task[None]"]


class OwnerUnreachable(Exception):
    """The owning instance did not answer in time."""


class OwnerGone(OwnerUnreachable):
    """The owning instance left the live instances before it took the request: the request
    never ran (it was withdrawn), and the session is no longer that instance's to act on."""


@dataclass(frozen=True, slots=True)
class ClusterHooks:
    """What the cluster calls back into the engine (wired once, by ``Engine.open``)."""

    #: the requests this instance serves as a turn's owner (``cancel``, ``send_now``, ...)
    handlers: Mapping[str, Handler]
    #: each heartbeat, with the live instances and those that died since the last (M6)
    on_orphans: Callable[[set[int], frozenset[int]], Awaitable[None]]
    #: this instance learns it was declared dead
    on_expelled: Callable[[], Awaitable[None]]


class Cluster:
    """One instance's link to the others on the same PostgreSQL database (``core.cluster``,
    None on SQLite)."""

    def __init__(
        self,
        *,
        instance: int,
        lease: float,
        store: Store,
        bus: EventBus,
        spawn: Spawn,
        hooks: ClusterHooks,
    ) -> None:
        self.instance = instance
        self.lease = lease
        self._store = store
        self._bus = bus
        self._spawn = spawn
        self._hooks = hooks
        self._outbox: asyncio.Queue[str] = asyncio.Queue()
        #: the requests this instance waits for, woken by their answer's NOTIFY
        self._replies: dict[str, asyncio.Event] = {}
        #: the requests this instance is running for others
        self._serving: set[str] = set()
        self._last_live: set[int] = set()
        #: instances heard from since the last heartbeat (they may have come and gone between
        #: two beats: their death still owes the others a sweep of eligible queues, M6)
        self._heard: set[int] = set()
        #: instances that died since the recovery loop last ran
        self._dead: set[int] = set()
        #: how every message this instance sends begins (``"o"``, its origin, comes first)
        self._own = origin_prefix(instance)
        self._listener = store.listen(self._on_message, self._on_resync)
        self._tasks: list[asyncio.Task[None]] = []
        #: set by the heartbeat for the recovery loop (which may wait for pooled connections)
        self._beat = asyncio.Event()

    async def start(self) -> None:
        async with self._store.lease() as tx:
            await tx.register_instance(self.instance)
        await self._listener.start()
        self._bus.add_listener(self._forward_runtime_event)
        self._tasks = [
            asyncio.create_task(self._send_loop(), name="cluster-outbox"),
            asyncio.create_task(self._heartbeat_loop(), name="cluster-heartbeat"),
            asyncio.create_task(self._recovery_loop(), name="cluster-recovery"),
        ]

    async def aclose(self) -> None:
        with contextlib.suppress(Exception):
            await within(self._outbox.join(), 2)
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._listener.aclose()
        with contextlib.suppress(Exception):
            async with self._store.lease() as tx:
                await tx.unregister_instance(self.instance)

    async def live(self) -> set[int]:
        async with self._store.read() as tx:
            return await tx.live_instances(self.lease)

    def durable_payload(
        self, kind: EventKind, session_id: str, revision: int, pending: bool | None = None
    ) -> str:
        """The NOTIFY payload announcing a durable change (``pending``: a cancellation
        transition's flag, C2), sent inside its transaction."""
        fields: dict[str, Any] = {"k": kind.value, "s": session_id, "r": revision}
        if pending is not None:
            fields["p"] = pending
        return message(self.instance, "ev", fields)

    def _forward_runtime_event(self, event: Event) -> None:
        """A runtime event of this instance, to the others through the ordered outbox."""
        fields = None if event.relayed else runtime_fields(event)
        if fields is not None:
            self._outbox.put_nowait(message(self.instance, "ev", fields))

    async def _send_loop(self) -> None:
        while True:
            batch = [await self._outbox.get()]
            while not self._outbox.empty() and len(batch) < 100:
                batch.append(self._outbox.get_nowait())
            try:
                await self._notify(batch)
            finally:
                for _ in batch:
                    self._outbox.task_done()

    async def _notify(self, batch: list[str]) -> None:
        """Send ``batch`` in one round trip; if that fails, each on its own, so one that cannot
        be sent (logged with its start) takes no other with it."""
        try:
            await self._store.notify(batch)
            return
        except Exception as exc:
            if len(batch) == 1:
                log.error("could not send a notification (%s): %.200s", exc, batch[0])
                return
            log.warning("could not send %d notifications at once (%s)", len(batch), exc)
        for one in batch:
            await self._notify([one])

    async def call(
        self, owner: int, op: str, args: dict[str, Any], timeout: float
    ) -> dict[str, Any]:
        """Ask ``owner`` to run ``op`` and wait for its outcome (its UserFacingError is raised
        here). :class:`OwnerUnreachable` when the owner left the live instances, or did not
        answer within ``timeout``; a request it had not claimed by then is withdrawn, so it
        never runs late. Both sides also read the row (the owner after each heartbeat, this side
        every ``POLL_SECONDS``): a lost notification costs time, never the request."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        wake = asyncio.Event()
        async with self._store.transaction() as tx:
            request = await tx.add_request(owner, self.instance, op, json.dumps(args))
            self._replies[request] = wake  # before COMMIT: the answer may come at once
            tx.notify(message(self.instance, "cmd", {"to": owner, "id": request}))
        try:
            while True:
                with contextlib.suppress(TimeoutError):
                    left = max(0.0, deadline - loop.time())
                    await within(wake.wait(), min(POLL_SECONDS, left))
                wake.clear()
                async with self._store.read() as tx:
                    row = await tx.owner_request(request)
                assert row is not None, "a request is kept a day"
                if row.state is RequestState.DONE:
                    return outcome(row)
                gone = owner not in await self.live()
                if gone or loop.time() >= deadline:
                    async with self._store.transaction() as tx:
                        withdrawn = await tx.move_request(
                            request, RequestState.PENDING, RequestState.WITHDRAWN
                        )
                    if withdrawn and gone:
                        raise OwnerGone(f"instance {owner} is gone; it did not run {op}")
                    raise OwnerUnreachable(f"instance {owner} did not answer {op}")
        finally:
            self._replies.pop(request, None)

    async def _serve(self, request_id: str) -> None:
        """Run a request asked of this instance, once: of a claim and a withdrawal one wins."""
        if request_id in self._serving:
            return
        self._serving.add(request_id)
        try:
            async with self._store.transaction() as tx:
                if not await tx.move_request(
                    request_id, RequestState.PENDING, RequestState.RUNNING
                ):
                    return  # withdrawn, or served already
                request = await tx.owner_request(request_id)
            assert request is not None
            result = await self._run(request.op, json.loads(request.args))
            async with self._store.transaction() as tx:
                await tx.move_request(
                    request_id, RequestState.RUNNING, RequestState.DONE, json.dumps(result)
                )
                tx.notify(message(self.instance, "re", {"to": request.origin, "id": request_id}))
        finally:
            self._serving.discard(request_id)

    async def _run(self, op: str, args: dict[str, Any]) -> dict[str, Any]:
        handler = self._hooks.handlers.get(op)
        try:
            if handler is None:
                raise ValueError(f"unknown operation {op!r}")
            return {"r": await handler(args)}
        except UserFacingError as error:
            return refusal(error.code, error.message, error.field)
        except Exception:
            log.exception("the %s asked by another instance failed", op)
            return refusal(ErrorCode.SESSION_BUSY, "the owning server failed")

    async def _serve_pending(self) -> None:
        """The fallback for a lost NOTIFY: the requests asked of this instance, after a beat."""
        async with self._store.read() as tx:
            pending = await tx.pending_requests(self.instance)
        for request_id in pending:
            if request_id not in self._serving:
                self._spawn(self._serve(request_id), f"serve:{request_id}")

    def _on_message(self, payload: str) -> None:
        # Every message this instance sends comes back on its own LISTEN connection; it has
        # already published them locally. Dropped before parsing (the origin comes first in
        # each message built here); any other spelling is still checked after parsing.
        if payload.startswith(self._own):
            return
        m = json.loads(payload)
        origin = m.get("o")
        if origin == self.instance:
            return  # our own: already published locally
        self._heard.add(int(origin or 0))
        kind = m.get("t")
        if kind == "ev":
            self._bus.publish(relayed_event(m))
        elif kind == "cmd" and m.get("to") == self.instance:
            self._spawn(self._serve(str(m["id"])), f"serve:{m['id']}")
        elif kind == "re" and m.get("to") == self.instance:
            wake = self._replies.get(m["id"])
            if wake is not None:
                wake.set()

    def _on_resync(self) -> None:
        """Notifications were lost while LISTEN was down: every subscriber re-reads (R3)."""
        for session_id in self._bus.sessions():
            self._bus.publish(Event(EventKind.RESYNC, session_id, relayed=True))

    async def _heartbeat_loop(self) -> None:
        """Refresh the lease every third of it, on the store's lease connection only.

        Hazard: nothing here may wait for a pooled connection or for recovery, or a busy
        instance would miss its lease and be declared dead; recovery runs in its own loop."""
        interval = self.lease / 3
        while True:
            await asyncio.sleep(interval)
            # Taken before the read: an instance heard from after it may have started after it.
            known = self._last_live | self._heard
            try:
                async with self._store.lease() as tx:
                    alive = await tx.heartbeat(self.instance, self.lease)
                    live = await tx.live_instances(self.lease) if alive else set()
                if not alive:
                    log.error("this instance was declared dead by the others; re-registering")
                    await self._hooks.on_expelled()  # let its turns go before it is live again
                    async with self._store.lease() as tx:
                        await tx.register_instance(self.instance)
                        live = await tx.live_instances(self.lease)
                self._dead |= known - live - {self.instance, 0}
                self._heard -= known
                self._last_live = live
                self._beat.set()
            except Exception:
                log.exception("heartbeat failed")

    async def _recovery_loop(self) -> None:
        """After each heartbeat: recover what dead instances left (M6)."""
        while True:
            await self._beat.wait()
            self._beat.clear()
            live, dead, self._dead = self._last_live, frozenset(self._dead), set()
            try:
                await self._hooks.on_orphans(live, dead)
            except Exception:
                log.exception("recovery after a heartbeat failed")
                self._dead |= dead  # try the sweep again after the next beat
            try:
                await self._serve_pending()
            except Exception:
                log.exception("looking for requests after a heartbeat failed")
