"""Several server processes on one PostgreSQL database (M4).

Each process is an *instance*, identified by its epoch (R2), with a row in ``instances`` that it
heartbeats. The instance that started a session's running turn *owns* it: only the owner can stop
its agent, so a ``cancel`` or a replacing ``sendNow`` received elsewhere is forwarded to it.

Messages travel on one NOTIFY channel as compact JSON:

- ``ev``: an event for subscribers. Durable changes (session, queue, cancellation transitions)
  are sent by the store inside their own transaction, so PostgreSQL delivers them only on COMMIT
  and in commit order. Runtime events (the output log's new ends) go through one ordered outbox.
  A receiver publishes them on its local bus marked ``relayed``.
- ``cmd`` / ``re``: a request to the owner and its reply.

A notification never carries what can exceed PostgreSQL's 8,000-byte payload (M4): every
message is ids, numbers and names, and output is a pointer, never its text — the turn and the
log's new end in characters (``OutputMark``), sent after the batch holding it committed, so a
receiver's readers read the text from the durable log (O1, ``engine/replay.py``); the items'
new end likewise (``LogBatch`` without records). Text JSON-escapes to up to 12 bytes a
character: cut by characters it once overflowed the limit, and the whole batch of notifications
with it. :func:`payload` refuses anything over the limit where a message is built (a request
that would carry one is refused INVALID_INPUT), and the send loop sends a batch that fails one
by one, so one notification that cannot be sent (logged) never takes the others with it.

C7: there is nothing to relay or confirm. The cancellation projection is rows every instance
reads (the CANCELLING holds in ``session_holds`` and the lock row's cancellation revision), so a
LISTEN outage loses only events: subscribers are told to resync (``_on_resync``) and read again.

The cluster is built from explicit parts (the store, the bus, the task spawner and
:class:`~turnqueue.engine.peers.ClusterHooks`, the engine's call-backs); ``Core`` knows it only
as :class:`~turnqueue.engine.peers.Peers`.

Hazards: a process may be declared dead while merely slow. It learns so at its next heartbeat
(its row is gone) and abandons its turns, whose ends the adopter has already recorded.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from typing import Any

from turnqueue.bus import Event, EventBus, EventKind
from turnqueue.domain import CancellationStatus, LogBatch, OutputMark, TurnStatus, new_id
from turnqueue.engine.peers import ClusterHooks, Handler, OwnerUnreachable, Spawn
from turnqueue.errors import Conflict, ErrorCode, InvalidInput, UserFacingError
from turnqueue.store import Store
from turnqueue.store.notify import MAX_PAYLOAD_BYTES

__all__ = ["Cluster", "ClusterHooks", "OwnerUnreachable"]

log = logging.getLogger(__name__)


#: Characters of an error message a reply carries at most (the rest is cut).
MAX_REASON = 500


class NotificationTooLarge(ValueError):
    """A message over NOTIFY's payload limit: refused where it is built, never sent."""


def payload(message: dict[str, Any]) -> str:
    """``message`` as one NOTIFY payload; NotificationTooLarge over the limit (M4)."""
    text = json.dumps(message, separators=(",", ":"))  # ASCII: one byte a character
    if len(text) > MAX_PAYLOAD_BYTES:
        raise NotificationTooLarge(f"a {message.get('t')} notification of {len(text)} chars")
    return text


class Cluster:
    """One instance's link to the others (implements :class:`~turnqueue.engine.peers.Peers`)."""

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
        self._replies: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self._handlers: dict[str, Handler] = dict(hooks.handlers)
        self._last_live: set[int] = set()
        #: instances heard from since the last heartbeat (they may have come and gone between
        #: two beats: their death still owes the others a sweep of eligible queues, M6)
        self._heard: set[int] = set()
        #: instances that died since the recovery loop last ran
        self._dead: set[int] = set()
        self._listener = store.listen(self._on_message, self._on_resync)
        self._tasks: list[asyncio.Task[None]] = []
        #: set by the heartbeat for the recovery loop (which may wait for pooled connections)
        self._beat = asyncio.Event()

    # -- lifecycle ------------------------------------------------------------------------------
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
            await asyncio.wait_for(self._outbox.join(), 2)
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

    # -- outgoing -------------------------------------------------------------------------------
    def durable_payload(
        self, kind: EventKind, session_id: str, revision: int, pending: bool | None = None
    ) -> str:
        message = {"o": self.instance, "t": "ev", "k": kind.value, "s": session_id, "r": revision}
        if pending is not None:
            message["p"] = pending  # C2: a cancellation transition's flag
        return payload(message)

    def _forward_runtime_event(self, event: Event) -> None:
        if event.relayed:
            return
        if event.kind is EventKind.OUTPUT and event.chunk is not None:
            # A pointer, never the text: published after its batch (or the end) committed, so
            # what it points to is in the log before any receiver reads it (O1, O2).
            o = event.chunk
            end = o.offset + len(o.text)
            self._send(
                {"t": "ev", "k": "output", "s": o.session_id, "u": o.turn_id, "n": end}
                | {"d": o.done, "st": o.status.value}
            )
        elif event.kind is EventKind.ITEMS and event.batch is not None:
            # Only the log's new end: a receiver's turnItems reads the records from the log.
            b = event.batch
            self._send({"t": "ev", "k": "items", "s": b.session_id, "u": b.turn_id, "n": b.end})

    def _send(self, message: dict[str, Any]) -> None:
        message["o"] = self.instance
        self._outbox.put_nowait(payload(message))

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
            try:
                await self._store.notify([one])
            except Exception as exc:
                log.error("could not send a notification (%s): %.200s", exc, one)

    # -- requests to the owner ------------------------------------------------------------------
    async def call(
        self, owner: int, op: str, args: dict[str, Any], timeout: float
    ) -> dict[str, Any]:
        """Run ``op`` on the owning instance; its UserFacingError comes back as one here."""
        request = new_id()
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._replies[request] = future
        try:
            try:
                self._send({"t": "cmd", "to": owner, "id": request, "op": op, "a": args})
            except NotificationTooLarge:
                raise InvalidInput(
                    f"the request is too large to forward to the instance running the turn ({op})"
                ) from None
            try:
                reply = await asyncio.wait_for(asyncio.shield(future), timeout)
            except TimeoutError as exc:
                raise OwnerUnreachable(f"instance {owner} did not answer {op}") from exc
        finally:
            self._replies.pop(request, None)
        if "code" in reply:
            raise Conflict(ErrorCode(reply["code"]), reply.get("msg", ""), reply.get("field"))
        result: dict[str, Any] = reply["r"]
        return result

    async def _serve(self, message: dict[str, Any]) -> None:
        reply: dict[str, Any] = {"t": "re", "to": message["o"], "id": message["id"]}
        handler = self._handlers.get(message["op"])
        try:
            if handler is None:
                raise ValueError(f"unknown operation {message['op']!r}")
            reply["r"] = await handler(message["a"])
        except UserFacingError as error:
            reply.update(code=error.code.value, msg=error.message[:MAX_REASON], field=error.field)
        except Exception:
            log.exception("forwarded %s failed", message["op"])
            reply.update(code=ErrorCode.SESSION_BUSY.value, msg="the owning server failed")
        try:
            self._send(reply)
        except NotificationTooLarge:
            log.error("the answer to a forwarded %s is too large to send", message["op"])
            reply = {"t": "re", "to": message["o"], "id": message["id"]}
            reply.update(code=ErrorCode.SESSION_BUSY.value, msg="the owning server's answer")
            self._send(reply)

    # -- incoming -------------------------------------------------------------------------------
    def _on_message(self, payload: str) -> None:
        message = json.loads(payload)
        origin = message.get("o")
        if origin == self.instance:
            return  # our own: already published locally
        self._heard.add(int(origin or 0))
        kind = message.get("t")
        if kind == "ev":
            self._relay(message)
        elif kind == "cmd" and message.get("to") == self.instance:
            self._spawn(self._serve(message), f"serve:{message['op']}")
        elif kind == "re" and message.get("to") == self.instance:
            future = self._replies.get(message["id"])
            if future is not None and not future.done():
                future.set_result(message)

    def _relay(self, m: dict[str, Any]) -> None:
        kind = EventKind(m["k"])
        sid = m["s"]
        if kind is EventKind.CANCELLATION:
            status = CancellationStatus(sid, bool(m["p"]), int(m["r"]))
            event = Event(kind, sid, status.revision, cancellation=status, relayed=True)
        elif kind is EventKind.OUTPUT:
            mark = OutputMark(sid, m["u"], int(m["n"]), bool(m["d"]), TurnStatus(m["st"]))
            event = Event(kind, sid, mark=mark, relayed=True)
        elif kind is EventKind.ITEMS:
            event = Event(kind, sid, batch=LogBatch(sid, m["u"], int(m["n"])), relayed=True)
        else:
            event = Event(kind, sid, int(m.get("r", 0)), relayed=True)
        self._bus.publish(event)

    def _on_resync(self) -> None:
        """Notifications were lost while LISTEN was down: every subscriber re-reads (R3)."""
        for session_id in self._bus.sessions():
            self._bus.publish(Event(EventKind.RESYNC, session_id, relayed=True))

    # -- liveness -------------------------------------------------------------------------------
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
