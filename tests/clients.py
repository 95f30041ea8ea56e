"""GraphQL-over-HTTP test client and bounded polling, shared by the tests that run real servers
(tests/ops, tests/cluster). Only loopback; every wait is bounded."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from pathlib import Path
from typing import Any

import httpx

WAIT = 20.0

#: One TLS context for every test HTTP client (``verify=TLS``). Without it httpx builds a new one
#: per client, loading the whole CA bundle: with OpenSSL 3.0 that is tens of milliseconds of CPU
#: on an idle machine and up to a second on a loaded one, per client. Our servers are plain HTTP.
TLS = httpx.create_ssl_context()


def free_port() -> int:
    """A loopback port free right now. Another process may take it before our server binds it:
    starters retry on another port when the log says so (:func:`port_taken`)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


#: How long a server process may take to listen and be ready (a loaded machine is slow).
START_WAIT = 90.0
#: How many ports a server start tries before giving up (each bind race picks a new one).
PORT_TRIES = 5


def port_taken(log: str) -> bool:
    """Did the server exit because its port was taken (uvicorn: ``[Errno 98] ... address
    already in use``) between :func:`free_port` and its bind?"""
    return "address already in use" in log.lower()


def listens(pid: int, port: int) -> bool:
    """Is process ``pid`` itself listening on TCP ``port`` (Linux ``/proc``)? A health check
    alone could be answered by another test's server that took the port first."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(table).read_text().splitlines()[1:]:
                fields = line.split()
                if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                    inodes.add(f"socket:[{fields[9]}]")
    if not inodes:
        return False
    with contextlib.suppress(OSError):
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                if os.readlink(f"/proc/{pid}/fd/{fd}") in inodes:
                    return True
    return False


class Client:
    """GraphQL over HTTP against ``base`` (no token unless given)."""

    def __init__(self, base: str, token: str | None = None) -> None:
        self.base = base
        self.url = f"{base}/graphql"
        self.ws_url = self.url.replace("http://", "ws://")
        self._headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.http = httpx.AsyncClient(timeout=WAIT, headers=self._headers, verify=TLS)

    async def aclose(self) -> None:
        await self.http.aclose()

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def gql(self, query: str, **variables: Any) -> dict[str, Any]:
        """The whole answer (``data`` and/or ``errors``); transport errors propagate."""
        response = await self.http.post(self.url, json={"query": query, "variables": variables})
        body: dict[str, Any] = response.json()
        return body

    async def data(self, query: str, **variables: Any) -> dict[str, Any]:
        body = await self.gql(query, **variables)
        assert "errors" not in body, body
        data: dict[str, Any] = body["data"]
        return data

    async def mutate(self, name: str, selection: str, **input: Any) -> dict[str, Any]:
        """The payload of ``name(input:)`` with ``userErrors { code message }`` (not checked)."""
        input_type = name[0].upper() + name[1:] + "Input"
        query = (
            f"mutation($input: {input_type}!) {{ {name}(input: $input) "
            f"{{ {selection} userErrors {{ code message }} }} }}"
        )
        payload: dict[str, Any] = (await self.data(query, input=input))[name]
        return payload

    async def ok(self, name: str, selection: str, **input: Any) -> dict[str, Any]:
        payload = await self.mutate(name, selection, **input)
        assert payload["userErrors"] == [], payload
        return payload

    async def create_session(self, agent: str | None = None) -> str:
        payload = await self.ok("createTask", "session { id }", title="ops", agent=agent)
        session_id: str = payload["session"]["id"]
        return session_id


async def poll(check: Any, what: str, timeout: float = WAIT, every: float = 0.05) -> Any:
    """Bounded polling of a condition owned by another task or process; returns its value."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        value = await check()
        if value:
            return value
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(every)
