"""``turnqueue.api.fanout_member.Member``: a member is the source Strawberry's handler reads; its
first frame goes through Strawberry and teaches it its prefix; from then on a payload offered
while it is idle is sent at once (no task switch, bench P3); a send that suspends (the client's
buffer full) is finished by the member's own task, with every payload offered meanwhile after
it, in order, at most one kept (R3); a client gone during a send ends the member with
WebSocketDisconnected, as Strawberry's adapter reports it."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from graphql import GraphQLError
from starlette.websockets import WebSocket, WebSocketDisconnect, WebSocketState
from strawberry.http.exceptions import WebSocketDisconnected

from turnqueue.api.fanout_member import EncodedPayload, Member, shared_frame
from turnqueue.graphql_internals import PreExecutionError
from turnqueue.timeouts import within


class Client:
    """The ASGI side of one WebSocket: records frames; ``block`` makes sends wait."""

    def __init__(self) -> None:
        self.frames: list[str] = []
        self.block: asyncio.Future[None] | None = None
        self.gone = False

    async def send(self, message: dict[str, Any]) -> None:
        if self.gone:
            raise WebSocketDisconnect(1006)
        if self.block is not None:
            await self.block
        if self.gone:  # went away while the send waited
            raise WebSocketDisconnect(1006)
        self.frames.append(message.get("text", message.get("type", "")))


def websocket(client: Client) -> WebSocket:
    async def receive() -> dict[str, Any]:
        await asyncio.Event().wait()
        return {}

    ws = WebSocket({"type": "websocket", "path": "/", "headers": []}, receive, client.send)
    ws.application_state = WebSocketState.CONNECTED
    return ws


class Group:
    """A group of one: what a member joins and leaves."""

    def __init__(self) -> None:
        self.last: str | None = None
        self.members: dict[Member, None] = {}
        self.left: list[Member] = []

    def leave(self, member: Member) -> None:
        del self.members[member]
        self.left.append(member)


async def strawberry(member: Member, ws: WebSocket, ended: list[str]) -> None:
    """What Strawberry's operation task does with the source: each result as a ``next``
    message encoded by the view (``shared_frame``), a first PreExecutionError as ``error``,
    then ``complete``."""
    try:
        async for result in member:
            if isinstance(result, PreExecutionError):
                ended.append("error")
                return
            frame = shared_frame({"id": "1", "type": "next", "payload": {"data": result.data}})
            assert frame is not None
            await ws.send_text(frame)
    except WebSocketDisconnect as gone:
        raise WebSocketDisconnected from gone
    finally:
        await member.aclose()  # Strawberry's aclosing
    ended.append("complete")


def frame(payload: str) -> str:
    return '{"id":"1","type":"next","payload":' + payload + "}"


async def reading(client: Client) -> tuple[Member, asyncio.Task[None], list[str]]:
    """A member that Strawberry's task reads, idle, its prefix still unknown; and how its
    operation ended."""
    ws = websocket(client)
    m = Member(ws, Group())
    ended: list[str] = []
    task = asyncio.create_task(strawberry(m, ws, ended))
    await idle(m, task)
    return m, task, ended


async def started(client: Client, first: str = "0") -> tuple[Member, asyncio.Task[None], list[str]]:
    """A member whose first payload Strawberry's task sent (its prefix known), now idle."""
    m, task, ended = await reading(client)
    assert m.offer(first, limit=4, resync="R")
    await idle(m, task)
    assert client.frames == [frame(first)] and m.prefix is not None
    return m, task, ended


async def idle(m: Member, task: asyncio.Task[None]) -> None:
    """Until the member's task waits for work."""
    while m.waiter is None or m.waiter.done() or m.pending is not None:
        assert not task.done(), task
        await asyncio.sleep(0)


async def test_p3_an_idle_member_is_sent_at_once_without_its_task() -> None:
    client = Client()
    m, task, ended = await started(client)
    assert m.offer("1", limit=4, resync="R") and client.frames[-1] == frame("1")  # synchronous
    assert m.offer("2", limit=4, resync="R") and client.frames[-1] == frame("2")
    m.finish(None)
    await within(task, 5)
    assert ended == ["complete"]


async def test_p3_a_member_without_a_prefix_is_sent_through_its_task() -> None:
    """Until Strawberry wrote one frame of the member, nothing is written for it directly."""
    client = Client()
    m, task, ended = await reading(client)
    assert m.offer("1", limit=4, resync="R") and client.frames == [] and m.pending == "1"
    m.finish(None)
    await within(task, 5)
    assert client.frames == [frame("1")] and ended == ["complete"]


async def test_a_member_being_cancelled_is_not_written_to() -> None:
    """The client completed the operation (Strawberry cancels its task): an offer made before
    the task has unwound writes nothing more on the connection."""
    client = Client()
    m, task, _ = await started(client)
    task.cancel()
    assert m.offer("1", limit=4, resync="R")
    assert client.frames == [frame("0")]
    with pytest.raises(asyncio.CancelledError):
        await task
    assert client.frames == [frame("0")]


async def test_r3_a_send_that_waits_is_finished_by_the_members_task_then_the_newest() -> None:
    client = Client()
    m, task, _ = await started(client)
    client.block = asyncio.get_running_loop().create_future()
    assert m.offer("1", limit=4, resync="R")  # begun, then suspended on the full buffer
    assert client.frames == [frame("0")] and m.sending is not None
    for payload in ("2", "3", "4"):  # offered meanwhile: the newest replaces the older
        assert m.offer(payload, limit=4, resync="R")
    assert m.pending == "4" and m.skipped == 2
    client.block.set_result(None)
    client.block = None
    await idle(m, task)
    assert client.frames == [frame("0"), frame("1"), frame("4")]  # the begun send, the newest
    m.finish(None)
    await within(task, 5)


async def test_r3_a_member_whose_send_stays_blocked_past_the_limit_is_resynced() -> None:
    client = Client()
    m, task, ended = await started(client)
    client.block = asyncio.get_running_loop().create_future()
    assert m.offer("1", limit=2, resync="RESYNC")
    assert m.offer("2", limit=2, resync="RESYNC") and m.offer("3", limit=2, resync="RESYNC")
    assert m.offer("4", limit=2, resync="RESYNC")
    assert not m.offer("5", limit=2, resync="RESYNC")  # past the limit: it leaves the group
    client.block.set_result(None)
    client.block = None
    await within(task, 5)
    assert client.frames == [frame("0"), frame("1"), frame("RESYNC")]
    assert ended == ["complete"]


async def test_s2_a_refused_member_yields_the_errors_first() -> None:
    """A refusal (NOT_FOUND) is the source's first result, a PreExecutionError: Strawberry
    answers it with an ``error`` message, as for its own stream."""
    client = Client()
    m, task, ended = await reading(client)
    m.finish([GraphQLError("session not found")])
    await within(task, 5)
    assert client.frames == [] and ended == ["error"]


@pytest.mark.parametrize("blocked_first", [False, True])
async def test_a_client_gone_during_a_send_ends_the_member_quietly(blocked_first: bool) -> None:
    client = Client()
    m, task, ended = await started(client)
    if blocked_first:  # gone while its task finishes a send that waited
        client.block = asyncio.get_running_loop().create_future()
        m.offer("1", limit=4, resync="R")
        client.gone = True
        client.block.set_result(None)
    else:  # gone when the send is begun at once
        client.gone = True
        m.offer("1", limit=4, resync="R")
    with pytest.raises(WebSocketDisconnected):
        await within(task, 5)
    assert client.frames == [frame("0")] and ended == []


async def test_a_member_cancelled_while_a_send_waits_abandons_it() -> None:
    client = Client()
    m, task, _ = await started(client)
    client.block = asyncio.get_running_loop().create_future()
    m.offer("1", limit=4, resync="R")
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert m.sending is None and client.frames == [frame("0")]


@pytest.mark.parametrize("end", ["finish", "cancel"])
async def test_r3_a_member_joins_with_the_groups_newest_payload_and_leaves_on_every_exit(
    end: str,
) -> None:
    """R3: a member that joins is first given the group's newest payload (the current state);
    it leaves the group when its results end and when Strawberry's task is cancelled."""
    group = Group()
    group.last = "newest"
    m = Member(websocket(Client()), group)
    taken: list[str] = []

    async def read() -> None:
        try:
            async for result in m:
                assert isinstance(result.data, EncodedPayload)
                taken.append(result.data.text)
        finally:
            await m.aclose()

    task = asyncio.create_task(read())
    await idle(m, task)
    assert taken == ["newest"] and group.members == {m: None}
    if end == "finish":
        m.finish(None)
        await within(task, 5)
    else:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert group.left == [m] and group.members == {}
