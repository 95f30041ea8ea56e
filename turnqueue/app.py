"""The composition root: ``create_app(settings)`` wires store, bus, engine and the GraphQL view.

Nothing happens at import time or in ``create_app`` itself: the database is migrated and opened,
and the engine started, in the lifespan; shutdown stops running turns, then closes the store.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route, WebSocketRoute

from turnqueue.agents import Agent
from turnqueue.api import (
    FanOut,
    Plans,
    TurnqueueGraphQL,
    build_schema,
    graphiql_routes,
    validation_rules,
    web_ui_routes,
)
from turnqueue.bus import EventBus
from turnqueue.engine import Engine
from turnqueue.prometheus import CONTENT_TYPE_LATEST, PrometheusMetrics
from turnqueue.settings import Settings

log = logging.getLogger(__name__)


def create_app(settings: Settings, agents: dict[str, Agent] | None = None) -> Starlette:
    engine: Engine | None = None  # opened by the lifespan; the view reads it at request time

    def get_engine() -> Engine:
        if engine is None:
            raise RuntimeError("the engine is not running (lifespan not started)")
        return engine

    rules = validation_rules(settings)
    schema = build_schema(settings, rules=rules)
    # Shared executions of identical snapshot subscriptions; its leads stop in the lifespan.
    fanout = (
        FanOut(
            schema,
            settings.max_tokens,
            settings.subscriber_buffer,
            rules,
            render=settings.compiled_operations,
        )
        if settings.subscription_fanout
        else None
    )
    # Mutations answered without GraphQL execution (the same answers; turnqueue.api.plans).
    plans = Plans(schema, rules, settings.max_tokens) if settings.compiled_operations else None
    view = TurnqueueGraphQL(schema, settings, get_engine, fanout, plans)
    metrics = PrometheusMetrics()  # a registry of its own per app (U3)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        nonlocal engine
        from turnqueue.store.migrate import migrate
        from turnqueue.store.sql import open_store

        await migrate(settings.async_database_url)
        store = await open_store(settings)
        try:
            bus = EventBus(settings.subscriber_buffer, on_deliver=metrics.delivered)
            engine = await Engine.open(settings, store, bus, agents=agents)
            app.state.engine = engine  # for operators' tooling and in-process tests
            app.state.metrics = metrics
            app.state.fanout = fanout  # for in-process tests
            app.state.plans = plans
            metrics.bind(engine)
            if fanout is not None:
                metrics.observe_fanout(fanout)
            try:
                yield
            finally:
                try:
                    if fanout is not None:
                        await fanout.aclose()  # before the engine its leads read from
                    await engine.aclose()  # /readyz answers 503 from here on
                finally:
                    metrics.unbind()
                    engine = None
        finally:
            await store.close()

    async def healthz(_request: Request) -> JSONResponse:
        return JSONResponse({"status": "ok"})

    async def readyz(_request: Request) -> JSONResponse:
        try:
            running = get_engine()
            if running.closing:
                raise RuntimeError("shutting down")
            async with asyncio.timeout(settings.db_timeout):
                await running.store.ping()
        except Exception as exc:
            log.warning("readiness check failed: %s", exc)
            return JSONResponse({"status": "unavailable"}, status_code=503)
        return JSONResponse({"status": "ok", "database": "ok"})

    async def metrics_page(_request: Request) -> Response:
        # No token (S1): the page carries counts only, never ids or content.
        await metrics.refresh()
        return Response(metrics.render(), media_type=CONTENT_TYPE_LATEST)

    middleware = []
    if settings.allowed_origins:
        middleware.append(
            Middleware(
                CORSMiddleware,
                allow_origins=settings.allowed_origins,
                allow_methods=["GET", "POST"],
                allow_headers=["authorization", "content-type"],
                max_age=600,
            )
        )
    return Starlette(
        routes=[
            Route("/graphql", view, methods=["GET", "POST"]),
            WebSocketRoute("/graphql", view),
            Route("/healthz", healthz),
            Route("/readyz", readyz),
            Route("/metrics", metrics_page),
            *graphiql_routes(),  # GraphiQL's assets (its page is the view's), when built
            *web_ui_routes(),  # the example web page at /, when it has been built
        ],
        middleware=middleware,
        lifespan=lifespan,
    )
