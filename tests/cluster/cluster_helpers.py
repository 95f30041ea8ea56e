"""Real ``turnqueue serve`` processes on one PostgreSQL database, and small clients for them."""

from __future__ import annotations

import asyncio
import os
import signal
import struct
import subprocess
import sys
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

import httpx
from clients import PORT_TRIES, START_WAIT, TLS, WAIT, Client, free_port, listens, port_taken
from gql import Client as GqlClient
from gql import gql
from gql.client import AsyncClientSession
from gql.transport.websockets import WebsocketsTransport
from sqlalchemy.engine import make_url

from turnqueue.store.notify import LISTENER_NAME
from turnqueue.timeouts import within


class Server:
    """One ``python -m turnqueue serve`` process."""

    def __init__(self, database_url: str, log: Path, **env: str) -> None:
        self._env = {
            **os.environ,
            "TURNQUEUE_DATABASE_URL": database_url,
            "TURNQUEUE_TOKENS": "",
            "TURNQUEUE_LEASE_SECONDS": "1.5",
            **env,
        }
        self._use_port(free_port())
        self._log_path = log
        self.process: subprocess.Popen[bytes] | None = None

    def _use_port(self, port: int) -> None:
        self.port = port
        self.url = f"http://127.0.0.1:{port}/graphql"
        self.ws_url = self.url.replace("http://", "ws://")
        self._env["TURNQUEUE_PORT"] = str(port)

    async def start(self, wait: float = START_WAIT) -> Server:
        """Start the process and wait until it listens and is healthy; a port taken between
        :func:`free_port` and the bind (by another test's server) is retried on a new one."""
        self._log = self._log_path.open("ab")
        for attempt in range(PORT_TRIES):
            offset = self._log.tell()
            self.process = subprocess.Popen(  # noqa: ASYNC220 (returns at once)
                [sys.executable, "-m", "turnqueue", "serve"],
                env=self._env,
                stdout=self._log,
                stderr=subprocess.STDOUT,
            )
            if await self._ready(wait):
                return self
            if attempt + 1 < PORT_TRIES and port_taken(self._log_path.read_text()[offset:]):
                self._use_port(free_port())
                continue
            raise RuntimeError(f"server exited: {self._log_path.read_text()[-2000:]}")
        raise AssertionError("unreachable")

    async def _ready(self, wait: float) -> bool:
        """True once this process listens on its port and answers ``/healthz``; False if it
        exited."""
        assert self.process is not None
        async with httpx.AsyncClient(timeout=2, verify=TLS) as http:
            for _ in range(int(wait / 0.1)):  # bounded
                if self.process.poll() is not None:
                    return False
                try:
                    if (
                        listens(self.process.pid, self.port)
                        and (await http.get(self.url.replace("/graphql", "/healthz"))).is_success
                    ):
                        return True
                except httpx.TransportError:
                    pass
                await asyncio.sleep(0.1)
        raise RuntimeError("server did not start")

    def log_text(self) -> str:
        """What the process has logged so far."""
        return self._log_path.read_text(errors="replace") if self._log_path.exists() else ""

    def kill(self) -> None:
        """SIGKILL: no shutdown path runs (a crash)."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(10)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.kill()
        self._log.close()

    async def gql(self, query: str, **variables: Any) -> dict[str, Any]:
        async with Client(self.url.removesuffix("/graphql")) as client:
            return await client.data(query, **variables)

    async def mutate(self, name: str, selection: str, **input: Any) -> dict[str, Any]:
        async with Client(self.url.removesuffix("/graphql")) as client:
            return await client.ok(name, selection, **input)

    async def create_session(self) -> str:
        payload = await self.mutate("createTask", "session { id }", title="cluster")
        session_id: str = payload["session"]["id"]
        return session_id

    async def turns(self, session_id: str) -> list[dict[str, Any]]:
        data = await self.gql(
            "query($s: ID!) { session(id: $s) { turns(last: 200) "
            "{ prompt status error startedAt } } }",
            s=session_id,
        )
        turns: list[dict[str, Any]] = data["session"]["turns"]
        return turns

    async def session(self, session_id: str) -> dict[str, Any]:
        data = await self.gql(
            "query($s: ID!) { session(id: $s) { state cancellationPending "
            "queue { autoRun pauseReason entries { content } } } }",
            s=session_id,
        )
        session: dict[str, Any] = data["session"]
        return session


class Subscriber:
    """One graphql-transport-ws connection with one subscription."""

    def __init__(self, server: Server, query: str, **variables: Any) -> None:
        self._transport = WebsocketsTransport(
            url=server.ws_url, subprotocols=[WebsocketsTransport.GRAPHQLWS_SUBPROTOCOL]
        )
        self._client = GqlClient(transport=self._transport)
        self._query = query
        self._variables = variables
        self._session: AsyncClientSession | None = None
        self._agen: AsyncGenerator[dict[str, Any], None] | None = None

    async def __aenter__(self) -> Subscriber:
        self._session = await self._client.connect_async()
        request = gql(self._query)
        request.variable_values = self._variables
        self._agen = self._session.subscribe(request)
        return self

    async def next(self, timeout: float = WAIT) -> dict[str, Any]:
        assert self._agen is not None
        return await within(self._agen.__anext__(), timeout)

    async def __aexit__(self, *exc: object) -> None:
        if self._agen is not None:
            await self._agen.aclose()
        await self._client.close_async()


class PgProxy:
    """A TCP proxy between one server process and PostgreSQL, to cut that process's LISTEN
    connection and keep it cut for as long as a test needs (C7, R2).

    ``hold()`` makes new *listener* connections (``application_name`` turnqueue-listen, read
    from the startup message) wait, accepted but not forwarded, until ``release()``; every other
    connection (the pools: requests, heartbeats) goes through at once. ``backends`` are this
    proxy's upstream local ports, i.e. ``pg_stat_activity.client_port`` of the process's
    backends, so a test can terminate exactly its LISTEN connection. The proxy declines TLS
    (answers an SSLRequest with ``N``, as a server without TLS does) to read the startup."""

    def __init__(self, database_url: str) -> None:
        url = make_url(database_url)
        self._upstream = (url.host or "127.0.0.1", url.port or 5432)
        self._url = url
        self._open = asyncio.Event()
        self._open.set()
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.backends: set[int] = set()

    async def start(self) -> str:
        """Listen on a free loopback port; returns the database URL to give the process."""
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        proxied = self._url.set(host="127.0.0.1", port=port)
        return proxied.render_as_string(hide_password=False)

    def hold(self) -> None:
        self._open.clear()

    def release(self) -> None:
        self._open.set()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            startup = await _startup(reader, writer)
            if b"application_name\x00" + LISTENER_NAME.encode() + b"\x00" in startup:
                await self._open.wait()
            up_reader, up_writer = await asyncio.open_connection(*self._upstream)
            self.backends.add(up_writer.get_extra_info("sockname")[1])
            up_writer.write(startup)
            await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
        except (OSError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass
        finally:
            writer.close()
            self._tasks.discard(task)

    async def aclose(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


SSL_REQUEST = 80877103


async def _startup(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bytes:
    """The client's startup message (after declining an SSLRequest), whole."""
    while True:
        head = await reader.readexactly(8)
        length, code = struct.unpack("!II", head)
        if length == 8 and code == SSL_REQUEST:
            writer.write(b"N")
            await writer.drain()
            continue
        return head + await reader.readexactly(length - 8)


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    finally:
        writer.close()
