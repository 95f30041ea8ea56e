"""Clients that follow sessions through the balancer and reconnect as real ones do (O2, O3, R3).

- :class:`Api`: GraphQL over HTTP through the balancer. A query that fails in transit is asked
  again; a mutation that fails in transit (a 502: its instance died) raises :class:`Unknown`:
  its outcome is for the caller to find out, never guessed.
- :class:`WsFollower`: one gql graphql-transport-ws connection per client carrying every
  followed session's snapshot subscriptions and a session-following ``turnOutput``. When the
  connection drops (its instance killed, or dropped on purpose at random) it connects again
  through the balancer and resumes: snapshots come first on every subscribe (R3); output
  resumes with ``turnId``/``afterOffset`` for turns it holds unfinished, and turns it missed
  while away are found with ``turnsConnection(after: <its cursor>)``.
- :class:`SseFollower`: the same over GraphQL over SSE (graphql-sse, distinct connections):
  each subscription its own streamed ``GET`` through the balancer; a reconnect repeats the same
  request with ``Last-Event-ID``, as ``EventSource`` does.

A reference client (``api=None``) is a :class:`WsFollower` on one instance directly that never
reconnects and never catches up: what it sees is what an uninterrupted client sees.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import httpx
from balancer import SERVED_BY
from clients import TLS
from fleet_view import OUTPUT, SNAPSHOTS, TURNS, OutputBroken, OutputStream, TurnView, View
from gql import Client as GqlClient
from gql import gql
from gql.client import AsyncClientSession
from gql.transport.exceptions import TransportError, TransportQueryError
from gql.transport.websockets import WebsocketsTransport
from websockets.exceptions import WebSocketException

#: How many times a query is asked again after failing in transit.
QUERY_TRIES = 20


class Unknown(Exception):
    """A request cut in transit: it may or may not have been applied."""


class Api:
    """GraphQL over HTTP through the balancer; counts which instance answered."""

    def __init__(self, base: str) -> None:
        self.url = f"{base}/graphql"
        self.http = httpx.AsyncClient(timeout=30, verify=TLS)
        self.served: Counter[str] = Counter()

    async def aclose(self) -> None:
        await self.http.aclose()

    async def post(self, query: str, variables: dict[str, Any]) -> dict[str, Any]:
        try:
            response = await self.http.post(self.url, json={"query": query, "variables": variables})
        except httpx.TransportError as exc:
            raise Unknown(repr(exc)) from None
        self.served[response.headers.get(SERVED_BY, "?")] += 1
        if response.status_code >= 500:  # the balancer's 502/503: no GraphQL answer
            raise Unknown(f"HTTP {response.status_code}")
        body: dict[str, Any] = response.json()
        return body

    async def data(self, query: str, **variables: Any) -> dict[str, Any]:
        """A query's data; asked again when cut in transit (a read changes nothing)."""
        for attempt in range(QUERY_TRIES):
            try:
                body = await self.post(query, variables)
            except Unknown:
                await asyncio.sleep(0.05 * (attempt + 1))  # back-off, not synchronisation
                continue
            assert "errors" not in body, body
            data: dict[str, Any] = body["data"]
            return data
        raise AssertionError(f"a query failed {QUERY_TRIES} times through the balancer")

    async def mutate(self, name: str, selection: str, **input: Any) -> dict[str, Any]:
        """The payload (``userErrors`` included, unchecked); :class:`Unknown` when cut."""
        input_type = name[0].upper() + name[1:] + "Input"
        query = (
            f"mutation($input: {input_type}!) {{ {name}(input: $input) "
            f"{{ {selection} userErrors {{ code message }} }} }}"
        )
        body = await self.post(query, {"input": input})
        assert "errors" not in body, body
        payload: dict[str, Any] = body["data"][name]
        return payload


ReadTurn = Callable[[str, int], Awaitable[None]]


async def catch_up(api: Api, view: View, read_turn: ReadTurn) -> None:
    """Turns started since the view's cursor (``turnsConnection(after:)``), then every turn
    the view holds unfinished, read from where it is (O2); the cursor then moves past the done
    ones. Only ids come from the query: output only from ``turnOutput``."""
    edges: list[dict[str, Any]] = []
    after = view.cursor
    for _ in range(100):  # bounded paging
        data = await api.data(TURNS, s=view.sid, after=after)
        page = data["session"]["turnsConnection"]
        edges += page["edges"]
        if not page["pageInfo"]["hasNextPage"]:
            break
        after = page["pageInfo"]["endCursor"]
    for edge in edges:
        view.turns.setdefault(edge["node"]["id"], TurnView())
    for turn_id, have in view.unfinished():
        await read_turn(turn_id, have)
    for edge in edges:
        if view.turns[edge["node"]["id"]].status is None:
            break
        view.cursor = edge["cursor"]


#: What a dropped connection looks like to the clients (never an assertion: those fail the test).
DROPPED = (
    TransportError,
    WebSocketException,
    OSError,
    TimeoutError,
    httpx.TransportError,
)


def _resync_or_raise(exc: TransportQueryError) -> None:
    """RESYNC (R3: the server could not keep this subscriber up to date) means subscribe
    again; any other GraphQL error is a bug."""
    errors = exc.errors or []
    if not all((e.get("extensions") or {}).get("code") == "RESYNC" for e in errors):
        raise AssertionError(f"subscription error: {exc}") from exc


@dataclass
class Stats:
    reconnects: int = 0
    drops: int = 0  # dropped on purpose
    resyncs: int = 0
    completes: int = 0  # streams that ended by themselves (then the test fails)


class WsFollower:
    """graphql-transport-ws (gql) through ``url``; see the module's docstring."""

    def __init__(
        self,
        name: str,
        url: str,
        views: dict[str, View],
        api: Api | None,
        rng: random.Random | None = None,
        drop_after: tuple[float, float] | None = None,
    ) -> None:
        self.name = name
        self._url = url
        self.views = views
        self._api = api
        self._rng = rng or random.Random(0)
        self._drop_after = drop_after
        self.stats = Stats()

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                await self._connection(stop)
            except TransportQueryError as exc:
                _resync_or_raise(exc)
                self.stats.resyncs += 1
            except DROPPED as exc:
                if self._api is None:
                    raise AssertionError(f"the reference client was interrupted: {exc!r}") from exc
                self.stats.reconnects += 1
                await asyncio.sleep(self._rng.uniform(0, 0.2))  # jitter, not synchronisation

    def _transport(self) -> WebsocketsTransport:
        return WebsocketsTransport(
            url=self._url,
            subprotocols=[WebsocketsTransport.GRAPHQLWS_SUBPROTOCOL],
            ping_interval=10,
            connect_timeout=10,
            close_timeout=2,
        )

    async def _connection(self, stop: asyncio.Event) -> None:
        """One connection's life: every subscription until it drops, is dropped on purpose
        (``drop_after``) or ``stop`` is set."""
        client = GqlClient(transport=self._transport())
        session = await client.connect_async()  # type: ignore[no-untyped-call]
        tasks: list[asyncio.Task[None]] = []
        for view in self.views.values():
            for kind in SNAPSHOTS:
                tasks.append(asyncio.create_task(self._snapshots(session, kind, view)))
            tasks.append(asyncio.create_task(self._output(session, view)))
        others: list[asyncio.Task[Any]] = [asyncio.create_task(stop.wait())]
        if self._drop_after is not None:
            drop = asyncio.sleep(self._rng.uniform(*self._drop_after))
            others.append(asyncio.create_task(drop))
        try:
            done, _ = await asyncio.wait([*tasks, *others], return_when=asyncio.FIRST_COMPLETED)
            for task in tasks:
                if task in done and (error := task.exception()) is not None:
                    raise error
            if any(task in done for task in tasks):
                raise AssertionError(f"{self.name}: a subscription ended by itself")
            if not stop.is_set():
                self.stats.drops += 1
        finally:
            for task in [*tasks, *others]:
                task.cancel()
            for task in [*tasks, *others]:
                with contextlib.suppress(BaseException):
                    await task
            with contextlib.suppress(Exception):
                await client.close_async()  # type: ignore[no-untyped-call]

    async def sync(self) -> None:
        """The last catch-up, on a connection of its own: turns missed and turns unfinished."""
        assert self._api is not None
        client = GqlClient(transport=self._transport())
        session = await client.connect_async()  # type: ignore[no-untyped-call]
        try:
            for view in self.views.values():
                await catch_up(self._api, view, partial(self._read_turn, session, view))
        finally:
            await client.close_async()  # type: ignore[no-untyped-call]

    async def _subscribe(
        self, session: AsyncClientSession, document: str, **variables: Any
    ) -> AsyncIterator[dict[str, Any]]:
        request = gql(document)
        request.variable_values = variables
        async for data in session.subscribe(request):
            yield data

    async def _snapshots(self, session: AsyncClientSession, kind: str, view: View) -> None:
        root, document = SNAPSHOTS[kind]
        async for data in self._subscribe(session, document, s=view.sid):
            view.snapshot(kind, data[root], f"ws {kind}")

    async def _output(self, session: AsyncClientSession, view: View) -> None:
        follow = asyncio.create_task(self._stream(session, view, None))
        try:
            if self._api is not None:
                await catch_up(self._api, view, partial(self._read_turn, session, view))
            await follow
        finally:
            follow.cancel()
            with contextlib.suppress(BaseException):
                await follow

    async def _stream(
        self, session: AsyncClientSession, view: View, start: tuple[str, int] | None
    ) -> OutputStream:
        stream = OutputStream(view, "ws resume" if start else "ws follow", start)
        variables: dict[str, Any] = {"s": view.sid}
        if start is not None:
            variables.update(t=start[0], a=start[1])
        async for data in self._subscribe(session, OUTPUT, **variables):
            stream.take(data["turnOutput"])
        return stream

    async def _read_turn(
        self, session: AsyncClientSession, view: View, turn_id: str, after: int
    ) -> None:
        await self._stream(session, view, (turn_id, after))
        if view.turns[turn_id].status is None:
            raise OutputBroken(f"{self.name}: turnOutput({turn_id}) ended before its done")


@dataclass
class SseEvent:
    event: str
    data: str
    id: str | None


async def sse_events(response: httpx.Response) -> AsyncIterator[SseEvent]:
    """The events of an SSE response (comments skipped), per the EventSource rules."""
    fields: dict[str, str] = {}
    async for line in response.aiter_lines():
        if line == "":
            if "event" in fields or "data" in fields:
                yield SseEvent(
                    fields.get("event", "message"), fields.get("data", ""), fields.get("id")
                )
            fields = {}
        elif not line.startswith(":"):
            name, _, value = line.partition(":")
            fields[name] = value[1:] if value.startswith(" ") else value


class SseFollower:
    """graphql-sse through the balancer; see the module's docstring."""

    def __init__(
        self,
        name: str,
        api: Api,
        views: dict[str, View],
        rng: random.Random,
        drop_after: tuple[float, float] = (2.0, 6.0),
    ) -> None:
        self.name = name
        self._api = api
        self.views = views
        self._rng = rng
        self._drop_after = drop_after
        self.stats = Stats()

    async def run(self, stop: asyncio.Event) -> None:
        loops = []
        for view in self.views.values():
            loops += [self._snapshots(kind, view, stop) for kind in SNAPSHOTS]
            loops.append(self._output(view, stop))
        await asyncio.gather(*loops)

    async def _events(
        self, variables: dict[str, Any], document: str, last_id: str | None
    ) -> AsyncIterator[SseEvent]:
        headers = {"Accept": "text/event-stream"}
        if last_id is not None:
            headers["Last-Event-ID"] = last_id
        params = {"query": document, "variables": json.dumps(variables)}
        async with self._api.http.stream(
            "GET", self._api.url, params=params, headers=headers, timeout=httpx.Timeout(30)
        ) as response:
            if response.status_code != 200:
                raise httpx.TransportError(f"HTTP {response.status_code}")
            async for event in sse_events(response):
                if event.event == "next" and "errors" in event.data:
                    body = json.loads(event.data)
                    raise TransportQueryError(str(body["errors"]), errors=body["errors"])
                yield event

    async def _snapshots(self, kind: str, view: View, stop: asyncio.Event) -> None:
        root, document = SNAPSHOTS[kind]
        last_id: str | None = None
        while not stop.is_set():
            try:
                async with asyncio.timeout(self._rng.uniform(*self._drop_after)):
                    async for event in self._events({"s": view.sid}, document, last_id):
                        if event.event == "next":
                            view.snapshot(kind, json.loads(event.data)["data"][root], f"sse {kind}")
                            last_id = event.id
                self.stats.completes += 1  # a snapshot stream never ends by itself
                raise AssertionError(f"{self.name}: {root} ended by itself")
            except TimeoutError:
                self.stats.drops += 1
            except TransportQueryError as exc:
                _resync_or_raise(exc)
                self.stats.resyncs += 1
            except DROPPED:
                self.stats.reconnects += 1
                await asyncio.sleep(self._rng.uniform(0, 0.2))

    async def _output(self, view: View, stop: asyncio.Event) -> None:
        last_id: str | None = None  # the last event's id: Last-Event-ID of the next request
        while not stop.is_set():
            start = _position(last_id)
            stream = OutputStream(view, "sse resume" if start else "sse follow", start)
            if last_id is not None and last_id.endswith(":done") and start is not None:
                stream.ended(start[0])  # resumed after its done: nothing more of that turn
            catching: asyncio.Task[None] | None = None
            try:
                async with asyncio.timeout(self._rng.uniform(*self._drop_after)):
                    async for event in self._events({"s": view.sid}, OUTPUT, last_id):
                        if catching is None and start is None:
                            catching = asyncio.create_task(
                                catch_up(self._api, view, partial(self._read_turn, view))
                            )
                        if event.event == "complete":
                            # Without turnId, a Last-Event-ID resume follows the session too (O3).
                            raise AssertionError(f"{self.name}: turnOutput ended by itself")
                        stream.take(json.loads(event.data)["data"]["turnOutput"])
                        last_id = event.id
                    else:
                        raise httpx.TransportError("stream ended without complete")
            except TimeoutError:
                self.stats.drops += 1
            except TransportQueryError as exc:
                _resync_or_raise(exc)
                self.stats.resyncs += 1
                last_id = None
            except DROPPED:
                self.stats.reconnects += 1
                await asyncio.sleep(self._rng.uniform(0, 0.2))
            finally:
                if catching is not None:
                    catching.cancel()
                    with contextlib.suppress(BaseException):
                        await catching

    async def _read_turn(self, view: View, turn_id: str, after: int) -> None:
        """One turn's rest, streamed with ``turnId``/``afterOffset`` until its ``done``."""
        for _ in range(50):  # bounded: each attempt resumes at what the view holds
            after = len(view.turns[turn_id].text)
            stream = OutputStream(view, "sse turn", (turn_id, after))
            try:
                variables = {"s": view.sid, "t": turn_id, "a": after}
                async for event in self._events(variables, OUTPUT, None):
                    if event.event == "complete":
                        break
                    stream.take(json.loads(event.data)["data"]["turnOutput"])
            except DROPPED:
                self.stats.reconnects += 1
                continue
            if view.turns[turn_id].status is None:
                raise OutputBroken(f"{self.name}: turnOutput({turn_id}) ended before its done")
            return
        raise AssertionError(f"{self.name}: could not read {turn_id}")

    async def catch_up(self) -> None:
        for view in self.views.values():
            await catch_up(self._api, view, partial(self._read_turn, view))


def _position(event_id: str | None) -> tuple[str, int] | None:
    """A turnOutput event id ``<turnId>:<offset>``, or ``<turnId>:<offset>:done`` for a turn's
    last message, as (turn, offset)."""
    if event_id is None:
        return None
    turn, _, offset = event_id.removesuffix(":done").rpartition(":")
    return turn, int(offset)
