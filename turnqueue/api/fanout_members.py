"""A member of a fan-out group (:mod:`turnqueue.api.fanout`): one client operation, sent its group's
payloads from a one-payload slot, framed as graphql-transport-ws ``next`` messages encoded once.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any

from graphql.error import GraphQLFormattedError
from starlette.websockets import WebSocket, WebSocketDisconnect
from strawberry.types import ExecutionResult

from turnqueue.graphql_internals import CompleteMessage, ErrorMessage, WebSocketDisconnected
from turnqueue.resolvers.context import Context

if TYPE_CHECKING:
    from turnqueue.graphql_internals import Operation


def next_prefix(operation_id: str) -> str:
    """The text of a ``next`` message up to its payload: the very text ``json.dumps`` gives
    ``{"id": …, "type": "next", "payload": …}`` (the payload's own follows, then ``}``)."""
    return '{"id":' + json.dumps(operation_id) + ',"type":"next","payload":'


def encode_payload(result: ExecutionResult) -> str:
    """A ``next`` payload as Strawberry's ``Operation.send_next`` builds it, encoded as the view's
    default ``encode_json`` does."""
    payload: dict[str, object] = {"data": result.data}
    if result.errors:
        payload["errors"] = [error.formatted for error in result.errors]
    if result.extensions:
        payload["extensions"] = result.extensions
    return json.dumps(payload, separators=(",", ":"))


class Member:
    """One client operation of a group, with a one-payload slot.

    Hazard (slow consumers): the lead never awaits a member. A member that is idle (its task
    waits, nothing pending) is sent the payload at once, by stepping the send's coroutine
    synchronously: a WebSocket send suspends only when the connection's buffer is full, and
    then the half-done send is handed to the member's own task (Strawberry's operation task) to
    finish, like every payload it is offered meanwhile. So the common case costs no task switch
    per member (bench P3), and a client that does not read blocks only its own task, in its
    socket's bounded send. The price: a fed group is offered its payload inside ``publish``, so
    the change that published it (a mutation's commit, under its session's lock) pays for the
    sends to the group's idle members before it answers. A payload not sent yet is
    replaced by a newer one (a full state with a revision: clients keep the highest, and the
    ordinary streams skip intermediate revisions in the same way), so a member holds at most one
    payload, a reference to the text its group shares. A member that had more than ``limit``
    payloads replaced since it last took one is too slow (the ordinary path's bus buffer would
    have overflowed by then): it leaves the group and is sent RESYNC (R3), so it resubscribes.
    """

    __slots__ = (
        "broken",
        "ended",
        "errors",
        "operation",
        "pending",
        "prefix",
        "sending",
        "skipped",
        "waiter",
        "websocket",
    )

    def __init__(self, operation: Operation[Context, None]) -> None:
        self.operation = operation
        self.prefix = next_prefix(operation.id)  # framed once, not per payload
        # Strawberry's ASGI adapter's Starlette WebSocket (an internal attribute, listed in
        # turnqueue.graphql_internals; the frames are compared with its own, test_api_fanout.py)
        websocket = getattr(operation.handler.websocket, "ws", None)
        assert isinstance(websocket, WebSocket)
        self.websocket = websocket
        #: a send that suspended, for the member's task to finish: (its coroutine, what it awaits)
        self.sending: tuple[Coroutine[Any, Any, None], Any] | None = None
        self.broken: BaseException | None = None  # what a send begun at once raised
        self.pending: str | None = None  # the newest payload not sent yet
        self.ended = False  # nothing more comes: after ``pending``, ``complete`` or ``error``
        self.errors: list[GraphQLFormattedError] | None = None  # for an ``error`` message
        self.skipped = 0  # payloads replaced since the member last took one
        self.waiter: asyncio.Future[None] | None = None

    def offer(self, payload: str, limit: int, resync: str) -> bool:
        """Send ``payload`` now if the member is idle, else put it in the slot; False when the
        member is too slow and must leave."""
        if self.ended:
            return False
        if self._idle():
            self._send_now(payload)
            return True
        if self.pending is not None:
            self.skipped += 1
            if self.skipped > limit:
                # The RESYNC ``next`` as the ordinary stream sends it, then ``complete``.
                self.pending, self.ended = resync, True
                self._wake()
                return False
        self.pending = payload
        self._wake()
        return True

    def finish(self, errors: list[GraphQLFormattedError] | None) -> None:
        if not self.ended:
            self.ended, self.errors = True, errors
            self._wake()

    def _wake(self) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)

    def _idle(self) -> bool:
        """Its task waits for work, and nothing is pending or being sent."""
        waiting = self.waiter is not None and not self.waiter.done()
        return waiting and self.pending is None and self.sending is None and self.broken is None

    def _send_now(self, payload: str) -> None:
        """Begin the send here; what it suspends on (a full buffer) its task finishes."""
        if self.operation.completed:
            return
        send = self.websocket.send_text(self.prefix + payload + "}")
        try:
            awaited = send.send(None)
        except StopIteration:
            return  # sent: the common case
        except BaseException as error:  # the client went away (or worse): its task says so
            self.broken = error
        else:
            self.sending = (send, awaited)
        self._wake()

    async def deliver(self) -> None:
        """Send the slot's payloads, in order, then the end; returns after the end was sent."""
        operation = self.operation
        while True:
            if self.broken is not None:
                await self._raise(self.broken)
            if self.sending is not None:
                await self._finish_sending()
            elif self.pending is not None:
                payload, self.pending, self.skipped = self.pending, None, 0
                if operation.completed:
                    return
                await self._send(self.prefix + payload + "}")
            elif self.ended:
                if self.errors is None:
                    await operation.send_operation_message(
                        CompleteMessage(id=operation.id, type="complete")
                    )
                else:
                    await operation.send_operation_message(
                        ErrorMessage(id=operation.id, type="error", payload=self.errors)
                    )
                return
            else:
                self.waiter = asyncio.get_running_loop().create_future()
                await self.waiter
                self.waiter = None

    async def _send(self, frame: str) -> None:
        """A ``next`` frame, straight to the connection's Starlette WebSocket: what Strawberry's
        ``send_operation_message`` ends in for a ``next`` message, without its three layers
        per frame (bench P3: a thousand members per event). ``complete`` and ``error`` go
        through Strawberry (they end the operation in its handler)."""
        try:
            await self.websocket.send_text(frame)
        except WebSocketDisconnect as gone:  # as Strawberry's adapter reports it
            raise WebSocketDisconnected from gone

    async def _finish_sending(self) -> None:
        """Drive a send begun by ``_send_now`` to its end, as a task would: wait for what it
        awaits, then resume it (its own ``await`` reads the outcome)."""
        assert self.sending is not None
        send, awaited = self.sending
        try:
            while True:
                if awaited is None:  # a bare yield (``asyncio.sleep(0)``): one turn of the loop
                    await asyncio.sleep(0)
                else:
                    await asyncio.wait([awaited])
                try:
                    awaited = send.send(None)
                except StopIteration:
                    return
        except WebSocketDisconnect as gone:
            raise WebSocketDisconnected from gone
        except BaseException:
            send.close()  # cancelled while it waited: the send is abandoned with the task
            raise
        finally:
            self.sending = None

    @staticmethod
    async def _raise(error: BaseException) -> None:
        if isinstance(error, WebSocketDisconnect):
            raise WebSocketDisconnected from error
        raise error
