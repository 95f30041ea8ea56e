"""GraphQL-over-HTTP test client and bounded polling, shared by the tests that run real servers
(tests/ops, tests/cluster). Only loopback; every wait is bounded."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import httpx

WAIT = 20.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Client:
    """GraphQL over HTTP against ``base`` (no token unless given)."""

    def __init__(self, base: str, token: str | None = None) -> None:
        self.base = base
        self.url = f"{base}/graphql"
        self.ws_url = self.url.replace("http://", "ws://")
        self._headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.http = httpx.AsyncClient(timeout=WAIT, headers=self._headers)

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
