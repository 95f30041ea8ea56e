"""Bad input at the HTTP and WebSocket edge of a real ``turnqueue serve`` process (S3, issue 23
finding 3): every refusal is GraphQL JSON with a 4xx status, leaves the connection usable, logs
no traceback, and a WebSocket message is held to the same size limit as an HTTP body.

The HTTP client is a raw keep-alive socket, so a test sees what a browser or a pooled client
sees: the status, the media type, and whether the *same* connection still answers.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest
from clients import WAIT, Client
from ops_helpers import ProcServer
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from turnqueue.timeouts import within

#: Small, so an oversized WebSocket message is cheap to send.
BODY_LIMIT = 4_096
SUBSCRIPTION = "subscription($s: ID!) { queueStatusChanged(sessionId: $s) { revision } }"


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[ProcServer]:
    proc = ProcServer(
        f"sqlite:///{tmp_path / 'edge.db'}",
        tmp_path / "server.log",
        TURNQUEUE_MAX_BODY_BYTES=str(BODY_LIMIT),
    )
    await proc.start()
    try:
        yield proc
    finally:
        proc.stop()


class KeepAlive:
    """One HTTP/1.1 connection, requests sent one after the other on it."""

    def __init__(self, port: int) -> None:
        self.port = port

    async def __aenter__(self) -> KeepAlive:
        self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.writer.close()

    async def request(
        self, method: str, target: str, body: bytes = b"", **headers: str
    ) -> tuple[int, dict[str, str], bytes]:
        lines = [f"{method} {target} HTTP/1.1", f"Host: 127.0.0.1:{self.port}"]
        lines += [f"{name.replace('_', '-')}: {value}" for name, value in headers.items()]
        lines.append(f"Content-Length: {len(body)}")
        self.writer.write(("\r\n".join(lines) + "\r\n\r\n").encode() + body)
        return await within(self._response(), WAIT)

    async def _response(self) -> tuple[int, dict[str, str], bytes]:
        status_line = await self.reader.readline()
        if not status_line:
            raise ConnectionError("the server closed the connection")
        status = int(status_line.split()[1])
        head: dict[str, str] = {}
        for _ in range(100):  # bounded
            line = (await self.reader.readline()).decode("latin-1").strip()
            if not line:
                break
            name, _, value = line.partition(":")
            head[name.strip().lower()] = value.strip()
        return status, head, await self.reader.readexactly(int(head.get("content-length", "0")))


def _graphql_error(status: int, head: dict[str, str], body: bytes) -> dict[str, Any]:
    assert 400 <= status < 500, (status, body)
    assert head["content-type"].startswith("application/json"), (head, body)
    errors = json.loads(body)["errors"]
    assert errors and errors[0]["message"] and errors[0]["extensions"]["code"], errors
    error: dict[str, Any] = errors[0]
    return error


async def test_s3_json_bodies_that_are_not_an_object_are_a_graphql_400_and_keep_the_connection(
    server: ProcServer,
) -> None:
    """Issue 23 (3): ``"…"``, ``1``, ``null``, ``true`` answered ``500 text/plain`` (an
    AttributeError inside Strawberry's body parsing) and closed the connection."""
    valid = json.dumps({"query": "{ tasks { id } }"}).encode()
    async with KeepAlive(server.port) as http:
        for body in (b'"{ tasks { id } }"', b"1", b"null", b"true", b"[]", b"[1]"):
            answer = await http.request("POST", "/graphql", body, Content_Type="application/json")
            error = _graphql_error(*answer)
            assert error["extensions"]["code"] == "BAD_REQUEST", (body, error)
            # The same connection answers the next request.
            status, _, data = await http.request(
                "POST", "/graphql", valid, Content_Type="application/json"
            )
            assert status == 200 and json.loads(data) == {"data": {"tasks": []}}, (body, data)
    assert "Traceback" not in server.log_text()


async def test_s3_a_subscription_sent_as_a_plain_request_is_a_graphql_400_without_a_fault(
    server: ProcServer,
) -> None:
    """Issue 23 (3): a subscription POSTed as plain JSON (not SSE) answered 200 with
    "Unexpected error." and logged a traceback; a GET did the same."""
    async with Client(server.base) as api:
        sid = await api.create_session()
    operation = {"query": SUBSCRIPTION, "variables": {"s": sid}}
    async with KeepAlive(server.port) as http:
        post = await http.request(
            "POST", "/graphql", json.dumps(operation).encode(), Content_Type="application/json"
        )
        variables = json.dumps(operation["variables"])
        target = "/graphql?" + urlencode({"query": SUBSCRIPTION, "variables": variables})
        get = await http.request("GET", target, Accept="application/json")
        for answer in (post, get):
            error = _graphql_error(*answer)
            assert "text/event-stream" in error["message"], error
            assert "WebSocket" in error["message"], error
        # Over SSE the same operation is served.
        status, head, _ = await _first_sse_bytes(server, operation)
        assert status == 200 and head["content-type"].startswith("text/event-stream")
    log = server.log_text()
    assert "Traceback" not in log and "unexpected error" not in log.lower()


async def _first_sse_bytes(
    server: ProcServer, operation: dict[str, Any]
) -> tuple[int, dict[str, str], bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    try:
        body = json.dumps(operation).encode()
        writer.write(
            (
                f"POST /graphql HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                f"Accept: text/event-stream\r\nContent-Length: {len(body)}\r\n\r\n"
            ).encode()
            + body
        )
        status = int((await within(reader.readline(), WAIT)).split()[1])
        head: dict[str, str] = {}
        for _ in range(100):
            line = (await reader.readline()).decode("latin-1").strip()
            if not line:
                break
            name, _, value = line.partition(":")
            head[name.strip().lower()] = value.strip()
        return status, head, await within(reader.read(200), WAIT)
    finally:
        writer.close()


async def test_s3_a_websocket_message_over_the_body_limit_is_refused_before_parsing(
    server: ProcServer,
) -> None:
    """Issue 23 (3): over graphql-transport-ws a message of any size was parsed whole (HTTP
    refuses a body over the limit with 413 before parsing it). Refused with close code 4400
    (the protocol's Bad Request, which graphql-ws reports at once instead of retrying), before
    ``connection_init`` as after it; a message within the limit is served."""
    url = f"ws://127.0.0.1:{server.port}/graphql"
    oversized = "x" * (BODY_LIMIT + 1)  # not even JSON: refused for its size, never parsed
    async with connect(url, subprotocols=["graphql-transport-ws"]) as ws:  # type: ignore[list-item]
        await ws.send(oversized)
        with pytest.raises(ConnectionClosed) as closed:
            await within(ws.recv(), WAIT)
    assert closed.value.rcvd is not None
    assert closed.value.rcvd.code == 4400
    assert f"larger than {BODY_LIMIT} bytes" in closed.value.rcvd.reason
    async with Client(server.base) as api:
        sid = await api.create_session()
    async with connect(url, subprotocols=["graphql-transport-ws"]) as ws:  # type: ignore[list-item]
        await ws.send(json.dumps({"type": "connection_init", "payload": {}}))
        assert json.loads(await within(ws.recv(), WAIT))["type"] == "connection_ack"
        payload = {"query": SUBSCRIPTION, "variables": {"s": sid}}
        await ws.send(json.dumps({"id": "1", "type": "subscribe", "payload": payload}))
        first = json.loads(await within(ws.recv(), WAIT))
        assert first["type"] == "next", first
        padded = {**payload, "extensions": {"pad": "x" * BODY_LIMIT}}
        await ws.send(json.dumps({"id": "2", "type": "subscribe", "payload": padded}))
        with pytest.raises(ConnectionClosed) as closed:
            for _ in range(10):  # bounded: the close follows at most a few frames
                await within(ws.recv(), WAIT)
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 4400
    assert "Traceback" not in server.log_text()


async def test_s3_deprecated_lists_refuse_a_negative_count_as_their_connections_do(
    server: ProcServer,
) -> None:
    """Issue 23 (3): ``tasks(first: -1)`` and ``turns(last: -3)`` answered ``[]`` where
    ``tasksConnection`` and ``turnsConnection`` refuse the same count (INVALID_INPUT)."""
    async with Client(server.base) as api:
        sid = await api.create_session()
        answers = {
            "tasks": await api.gql("{ tasks(first: -1) { id } }"),
            "tasksConnection": await api.gql("{ tasksConnection(first: -1) { edges { cursor } } }"),
            "turns": await api.gql(
                "query($s: ID!) { session(id: $s) { turns(last: -3) { id } } }", s=sid
            ),
            "turnsConnection": await api.gql(
                "query($s: ID!) { session(id: $s) { turnsConnection(last: -3) { edges "
                "{ cursor } } } }",
                s=sid,
            ),
        }
        fine = await api.gql("{ tasks(first: 0) { id } }")
    for name, body in answers.items():
        assert body.get("errors"), (name, body)
        error = body["errors"][0]
        assert error["extensions"]["code"] == "INVALID_INPUT", (name, error)
        assert "must not be negative" in error["message"], (name, error)
    assert fine == {"data": {"tasks": []}}
