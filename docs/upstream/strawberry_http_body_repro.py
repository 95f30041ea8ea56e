"""Strawberry 0.341.2: two requests a plain ASGI ``GraphQL`` view answers with a fault.

1. A JSON body that is valid JSON but no object (``"x"``, ``1``, ``null``, ``true``):
   ``AsyncBaseHTTPView.parse_http_body`` calls ``data.get("query")`` on it, an
   ``AttributeError``: a bare ``500 Internal Server Error`` (text/plain), and the server closes
   the connection.
2. A subscription in a POST that asks for no stream (no ``Accept: text/event-stream`` or
   multipart): ``OperationType.from_http`` allows SUBSCRIPTION for every POST, and
   ``execute_single`` runs it through ``Schema.execute``, which executes it as a query: the
   resolver's async generator is no value, "Cannot return null for non-nullable field" (logged
   as an error) and a 200 answer. It should be refused like any operation type the request
   cannot run (400).

Run: ``python strawberry_http_body_repro.py`` (needs strawberry-graphql 0.341.2 and httpx).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator

import httpx
import strawberry
from strawberry.asgi import GraphQL


@strawberry.type
class Query:
    hello: str = "world"


@strawberry.type
class Subscription:
    @strawberry.subscription
    async def ticks(self) -> AsyncGenerator[int, None]:
        yield 1


app = GraphQL(strawberry.Schema(query=Query, subscription=Subscription))


async def main() -> None:
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        for body in (b'"x"', b"1", b"null", b"true"):
            response = await client.post(
                "/graphql", content=body, headers={"content-type": "application/json"}
            )
            print(f"body {body!r}: {response.status_code} {response.headers.get('content-type')}")
        response = await client.post("/graphql", json={"query": "subscription { ticks }"})
        print(f"subscription over a plain POST: {response.status_code} {response.text}")


if __name__ == "__main__":
    asyncio.run(main())
