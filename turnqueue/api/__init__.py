"""The GraphQL edge: the schema's assembly (``assembly``, ``execution``), the view over HTTP,
WebSocket and SSE (``view``, with the pages ``graphiql`` and ``webui``), the shared execution of
identical snapshot subscriptions (``fanout``) and the operations answered
without GraphQL execution (``render``, ``plans``).

What the composition root and the CLI use is exported here. Strawberry's and graphql-core's
non-public names come through :mod:`turnqueue.graphql_internals` only (docs/architecture.md).
"""

from turnqueue.api.assembly import build_schema, print_schema_sdl, validation_rules
from turnqueue.api.fanout import FanOut
from turnqueue.api.graphiql import graphiql_routes
from turnqueue.api.plans import Plans
from turnqueue.api.view import TurnqueueGraphQL
from turnqueue.api.webui import web_ui_routes

__all__ = [
    "FanOut",
    "Plans",
    "TurnqueueGraphQL",
    "build_schema",
    "graphiql_routes",
    "print_schema_sdl",
    "validation_rules",
    "web_ui_routes",
]
