"""The API tests' client of a running server (:class:`Api`), the mutation that opens a task
(``CREATE``) and the factory type of ``start_api``; the fixtures are in conftest.py."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from typing import Any

import httpx
from clients import TLS
from gql import Client, gql
from gql.client import AsyncClientSession
from gql.transport.websockets import WebsocketsTransport
from starlette.applications import Starlette

from turnqueue.engine import Engine
from turnqueue.settings import Settings
from turnqueue.timeouts import within

WAIT = 10.0

CREATE = """
mutation($title: String!, $agent: String) {
  createTask(input: {title: $title, agent: $agent}) {
    task { id } session { id state revision } userErrors { code message field }
  }
}"""


class Stream:
    """One subscription; ``next()`` awaits the next message with a timeout (never sleeps)."""

    def __init__(self, agen: AsyncGenerator[dict[str, Any], None]) -> None:
        self._agen = agen

    async def next(self, timeout: float = WAIT) -> dict[str, Any]:
        return await within(self._agen.__anext__(), timeout)

    async def until(
        self,
        predicate: Callable[[dict[str, Any]], bool],
        timeout: float = WAIT,
    ) -> list[dict[str, Any]]:
        """Messages up to and including the first that satisfies ``predicate``."""
        seen: list[dict[str, Any]] = []

        async def collect() -> None:
            async for message in self._agen:
                seen.append(message)
                if predicate(message):
                    return
            raise AssertionError(f"stream ended before the awaited message: {seen}")

        await within(collect(), timeout)
        return seen

    async def aclose(self) -> None:
        await self._agen.aclose()


class Ws:
    def __init__(self, session: AsyncClientSession) -> None:
        self.session = session
        self.streams: list[Stream] = []

    def subscribe(self, query: str, **variables: Any) -> Stream:
        request = gql(query)
        request.variable_values = variables
        stream = Stream(self.session.subscribe(request))
        self.streams.append(stream)
        return stream

    async def execute(self, query: str, **variables: Any) -> dict[str, Any]:
        request = gql(query)
        request.variable_values = variables
        return await self.session.execute(request)


class Api:
    def __init__(self, base: str, settings: Settings, app: Starlette) -> None:
        self.app = app
        self.url = f"{base}/graphql"
        self.base = base
        self.ws_url = self.url.replace("http://", "ws://")
        self.settings = settings
        self.http = httpx.AsyncClient(timeout=WAIT, verify=TLS)

    @property
    def engine(self) -> Engine:
        """The server's engine (same process): for publishing bus events directly in tests."""
        engine: Engine = self.app.state.engine
        return engine

    async def post(
        self, query: str, variables: dict[str, Any] | None = None, token: str | None = "tok-a"
    ) -> httpx.Response:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return await self.http.post(
            self.url, json={"query": query, "variables": variables or {}}, headers=headers
        )

    async def gql(
        self, query: str, token: str | None = "tok-a", **variables: Any
    ) -> dict[str, Any]:
        """The whole JSON answer (``data`` and/or ``errors``)."""
        response = await self.post(query, variables, token)
        body: dict[str, Any] = response.json()
        return body

    async def data(
        self, query: str, token: str | None = "tok-a", **variables: Any
    ) -> dict[str, Any]:
        body = await self.gql(query, token, **variables)
        assert "errors" not in body, body
        result: dict[str, Any] = body["data"]
        return result

    async def mutate(
        self, name: str, selection: str, token: str = "tok-a", **input: Any
    ) -> dict[str, Any]:
        """Run mutation ``name(input: $input) { <selection> userErrors {...} }``; its payload."""
        input_type = name[0].upper() + name[1:] + "Input"
        query = (
            f"mutation($input: {input_type}!) {{ {name}(input: $input) "
            f"{{ {selection} userErrors {{ code message field }} }} }}"
        )
        data = await self.data(query, token, input=input)
        payload: dict[str, Any] = data[name]
        return payload

    async def create_session(self, token: str = "tok-a", agent: str | None = None) -> str:
        data = await self.data(CREATE, token, title="a task", agent=agent)
        assert data["createTask"]["userErrors"] == [], data
        session_id: str = data["createTask"]["session"]["id"]
        return session_id

    @contextlib.asynccontextmanager
    async def ws(self, token: str | None = "tok-a", **transport: Any) -> AsyncIterator[Ws]:
        init = {"authorization": f"Bearer {token}"} if token is not None else {}
        client = Client(
            transport=WebsocketsTransport(
                url=self.ws_url,
                init_payload=init,
                subprotocols=[WebsocketsTransport.GRAPHQLWS_SUBPROTOCOL],  # graphql-transport-ws
                **transport,
            ),
            fetch_schema_from_transport=False,
        )
        async with client as session:
            ws = Ws(session)
            try:
                yield ws
            finally:
                for stream in ws.streams:  # gql otherwise waits close_timeout for each
                    with contextlib.suppress(Exception):
                        await stream.aclose()


ApiFactory = Callable[..., Awaitable[Api]]
