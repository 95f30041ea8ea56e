"""One client's subscription in a fan-out group (``api/fanout.py``): the source Strawberry's
graphql-transport-ws handler reads, with a one-payload slot, and the frame the view writes for
it (:func:`shared_frame`).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Coroutine
from typing import Any, Protocol

from graphql import GraphQLError
from starlette.websockets import WebSocket, WebSocketDisconnect
from strawberry.types import ExecutionResult

from turnqueue.graphql_internals import PreExecutionError, WebSocketDisconnected


class Group(Protocol):
    """What a member joins (the fan-out's group): its members and its newest payload."""

    last: str | None
    members: dict[Member, None]

    def leave(self, member: Member) -> None: ...


class EncodedPayload(dict[str, object]):
    """The ``data`` of a result a member yields: the whole ``next`` payload, already encoded
    (``text``, shared by the group), for :func:`shared_frame`."""

    __slots__ = ("member", "text")

    def __init__(self, text: str, member: Member) -> None:
        super().__init__()
        self.text = text
        self.member = member


def shared_frame(message: object) -> str | None:
    """The frame of a ``next`` message that carries an :class:`EncodedPayload`, or None. Teaches
    the member its frames' prefix, so that it can be written to at once from then on."""
    if not isinstance(message, dict) or message.get("type") != "next":
        return None
    payload = message.get("payload")
    data = payload.get("data") if isinstance(payload, dict) else None
    if not isinstance(data, EncodedPayload) or not isinstance(message.get("id"), str):
        return None
    # The very text the view's default ``encode_json`` gives ``{"id": …, "type": "next",
    # "payload": …}`` up to the payload (the payload follows, then ``}``).
    prefix = '{"id":' + json.dumps(message["id"]) + ',"type":"next","payload":'
    data.member.prefix = prefix
    return prefix + data.text + "}"


def _gone(error: BaseException) -> BaseException:
    """What Strawberry's adapter raises for a client gone while being sent to."""
    if isinstance(error, WebSocketDisconnect):
        gone = WebSocketDisconnected()
        gone.__cause__ = error
        return gone
    return error


def quiet_disconnects(record: logging.LogRecord) -> bool:
    """A log filter for ``strawberry.ws.task``: a client gone while being sent to is an ordinary
    end of a connection, not a failed operation to log with its traceback."""
    error = record.exc_info[1] if record.exc_info else None
    return not isinstance(error, WebSocketDisconnected)


class Member:
    """One client's subscription in a group, with a one-payload slot.

    Hazard (slow consumers): the group never awaits a member. An idle member (its task waits in
    ``__anext__``, nothing pending, its frame prefix known) is written the payload at once by
    stepping the send's coroutine synchronously: a WebSocket send suspends only when the
    connection's buffer is full, and then the half-done send is handed to the member's own task
    to finish, so a client that does not read blocks only its own task. Otherwise the payload
    waits in the slot for the member's task; a payload not sent yet is replaced by a newer one
    (a full state with a revision), so a member holds at most one. A member that had more than
    ``limit`` payloads replaced since it last took one is too slow: it leaves the group and is
    sent RESYNC (R3).
    """

    __slots__ = (
        "broken",
        "ended",
        "errors",
        "group",
        "pending",
        "prefix",
        "sending",
        "skipped",
        "task",
        "waiter",
        "websocket",
    )

    def __init__(self, websocket: WebSocket | None, group: Group) -> None:
        """Joins ``group``: its results begin with the group's newest payload (R3)."""
        #: the client's connection (``Context.request``), for the sends made at once
        self.websocket = websocket
        #: the text of this member's ``next`` frames before the payload, once Strawberry wrote one
        self.prefix: str | None = None
        #: the operation's task (Strawberry's), which reads the member (``__anext__``)
        self.task: asyncio.Task[Any] | None = None
        #: a send that suspended, for the member's task to finish: (its coroutine, what it awaits)
        self.sending: tuple[Coroutine[Any, Any, None], Any] | None = None
        self.broken: BaseException | None = None  # what a send begun at once raised
        self.ended = False  # nothing more comes: after ``pending``, the end
        self.errors: list[GraphQLError] | None = None  # the operation was refused: an ``error``
        self.skipped = 0  # payloads replaced since the member last took one
        self.waiter: asyncio.Future[None] | None = None
        self.group = group
        # Hazard (R3, snapshot first): the replay of the group's newest payload and the join
        # happen with no await in between, so the group cannot publish in between: everything
        # it publishes from now on is newer.
        self.pending: str | None = group.last  # the newest payload not sent yet
        group.members[self] = None

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

    def finish(self, errors: list[GraphQLError] | None) -> None:
        if not self.ended:
            self.ended, self.errors = True, errors
            self._wake()

    def _wake(self) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)

    def _idle(self) -> bool:
        """Its task waits for work and is not being cancelled (the client's ``complete``, a
        closed connection), nothing is pending or being sent, and its prefix is known."""
        waiting = self.waiter is not None and not self.waiter.done()
        return (
            waiting
            and self.prefix is not None
            and self.websocket is not None
            and self.pending is None
            and self.sending is None
            and self.broken is None
            and not (self.task is not None and self.task.cancelling())
        )

    def _send_now(self, payload: str) -> None:
        """Begin the send here; what it suspends on (a full buffer) its task finishes."""
        assert self.websocket is not None and self.prefix is not None
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

    # -- the source Strawberry reads (not an async generator: smaller when idle) --------------
    def __aiter__(self) -> Member:
        return self

    async def __anext__(self) -> ExecutionResult:
        """The next result for Strawberry to send: each payload in the slot (as an
        :class:`EncodedPayload`), then the end; a refusal's errors as the first result."""
        if self.task is None:
            self.task = asyncio.current_task()
        while True:
            if self.broken is not None:
                raise _gone(self.broken)
            if self.sending is not None:
                await self._finish_sending()
            elif self.pending is not None:
                payload, self.pending, self.skipped = self.pending, None, 0
                return ExecutionResult(data=EncodedPayload(payload, self), errors=None)
            elif self.ended:
                if self.errors is not None:
                    errors, self.errors = self.errors, None
                    return PreExecutionError(data=None, errors=errors)
                raise StopAsyncIteration
            else:
                self.waiter = asyncio.get_running_loop().create_future()
                try:
                    await self.waiter
                finally:
                    self.waiter = None

    async def aclose(self) -> None:
        """Leave the group (Strawberry closes the source on every exit: the end, the client's
        ``complete``, a closed connection)."""
        self.ended = True
        self.group.leave(self)

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
            raise _gone(gone) from gone
        except BaseException:
            send.close()  # cancelled while it waited: the send is abandoned with the task
            raise
        finally:
            self.sending = None
