"""``turnqueue.api.fanout_members``: a fan-out member is sent a payload at once when it is idle (no
task switch, bench P3); a send that suspends (the client's buffer full) is finished by the
member's own task, with every payload offered meanwhile after it, in order, at most one kept
(R3); a client gone during a send ends the member quietly (WebSocketDisconnected)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest
from starlette.websockets import WebSocket, WebSocketDisconnect, WebSocketState
from strawberry.http.exceptions import WebSocketDisconnected

from turnqueue.api.fanout_members import Member
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

    async def receive(self) -> dict[str, Any]:
        await asyncio.Event().wait()
        return {}


def member(client: Client) -> tuple[Member, list[Any]]:
    ws = WebSocket({"type": "websocket", "path": "/", "headers": []}, client.receive, client.send)
    ws.application_state = WebSocketState.CONNECTED
    ended: list[Any] = []

    async def send_operation_message(message: Any) -> None:
        ended.append(message)

    operation = SimpleNamespace(
        id="1",
        completed=False,
        handler=SimpleNamespace(websocket=SimpleNamespace(ws=ws)),
        send_operation_message=send_operation_message,
    )
    return Member(operation), ended  # type: ignore[arg-type]


def frame(payload: str) -> str:
    return '{"id":"1","type":"next","payload":' + payload + "}"


async def idle(m: Member, task: asyncio.Task[None]) -> None:
    """Until the member's task waits for work."""
    while m.waiter is None or m.waiter.done():
        assert not task.done(), task
        await asyncio.sleep(0)


async def test_p3_an_idle_member_is_sent_at_once_without_its_task() -> None:
    client = Client()
    m, ended = member(client)
    task = asyncio.create_task(m.deliver())
    await idle(m, task)
    assert m.offer("1", limit=4, resync="R") and client.frames == [frame("1")]  # synchronous
    assert m.offer("2", limit=4, resync="R") and client.frames == [frame("1"), frame("2")]
    m.finish(None)
    await within(task, 5)
    assert [e["type"] for e in ended] == ["complete"]


async def test_r3_a_send_that_waits_is_finished_by_the_members_task_then_the_newest() -> None:
    client = Client()
    m, _ = member(client)
    task = asyncio.create_task(m.deliver())
    await idle(m, task)
    client.block = asyncio.get_running_loop().create_future()
    assert m.offer("1", limit=4, resync="R")  # begun, then suspended on the full buffer
    assert client.frames == [] and m.sending is not None
    for payload in ("2", "3", "4"):  # offered meanwhile: the newest replaces the older
        assert m.offer(payload, limit=4, resync="R")
    assert m.pending == "4" and m.skipped == 2
    client.block.set_result(None)
    client.block = None
    await idle(m, task)
    assert client.frames == [frame("1"), frame("4")]  # the begun send first, then the newest
    m.finish(None)
    await within(task, 5)


async def test_r3_a_member_whose_send_stays_blocked_past_the_limit_is_resynced() -> None:
    client = Client()
    m, ended = member(client)
    task = asyncio.create_task(m.deliver())
    await idle(m, task)
    client.block = asyncio.get_running_loop().create_future()
    assert m.offer("1", limit=2, resync="RESYNC")
    assert m.offer("2", limit=2, resync="RESYNC") and m.offer("3", limit=2, resync="RESYNC")
    assert m.offer("4", limit=2, resync="RESYNC")
    assert not m.offer("5", limit=2, resync="RESYNC")  # past the limit: it leaves the group
    client.block.set_result(None)
    client.block = None
    await within(task, 5)
    assert client.frames == [frame("1"), frame("RESYNC")]
    assert [e["type"] for e in ended] == ["complete"]


@pytest.mark.parametrize("blocked_first", [False, True])
async def test_a_client_gone_during_a_send_ends_the_member_quietly(blocked_first: bool) -> None:
    client = Client()
    m, ended = member(client)
    task = asyncio.create_task(m.deliver())
    await idle(m, task)
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
    assert client.frames == [] and ended == []


async def test_a_member_cancelled_while_a_send_waits_abandons_it() -> None:
    client = Client()
    m, _ = member(client)
    task = asyncio.create_task(m.deliver())
    await idle(m, task)
    client.block = asyncio.get_running_loop().create_future()
    m.offer("1", limit=4, resync="R")
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert m.sending is None and client.frames == []
