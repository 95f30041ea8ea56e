"""Real ``turnqueue serve`` processes on one PostgreSQL database, and small clients for them."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

import httpx
from clients import WAIT, Client, free_port
from gql import Client as GqlClient
from gql import gql
from gql.client import AsyncClientSession
from gql.transport.websockets import WebsocketsTransport


class Server:
    """One ``python -m turnqueue serve`` process."""

    def __init__(self, database_url: str, log: Path, **env: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/graphql"
        self.ws_url = self.url.replace("http://", "ws://")
        self._env = {
            **os.environ,
            "TURNQUEUE_DATABASE_URL": database_url,
            "TURNQUEUE_PORT": str(self.port),
            "TURNQUEUE_TOKENS": "",
            "TURNQUEUE_LEASE_SECONDS": "1.5",
            **env,
        }
        self._log_path = log
        self.process: subprocess.Popen[bytes] | None = None

    async def start(self) -> Server:
        self._log = self._log_path.open("ab")
        self.process = subprocess.Popen(  # noqa: ASYNC220 (returns at once)
            [sys.executable, "-m", "turnqueue", "serve"],
            env=self._env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        async with httpx.AsyncClient(timeout=2) as http:
            for _ in range(200):  # bounded: up to ~20 s for the process to listen
                if self.process.poll() is not None:
                    raise RuntimeError(f"server exited: {self._log_path.read_text()[-2000:]}")
                try:
                    if (await http.get(self.url.replace("/graphql", "/healthz"))).is_success:
                        return self
                except httpx.TransportError:
                    pass
                await asyncio.sleep(0.1)
        raise RuntimeError("server did not start")

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
        return await asyncio.wait_for(self._agen.__anext__(), timeout)

    async def __aexit__(self, *exc: object) -> None:
        if self._agen is not None:
            await self._agen.aclose()
        await self._client.close_async()
