"""The GraphQL edge: everything that speaks GraphQL over HTTP, WebSocket and SSE.

- the schema's assembly from the resolver roots, its extensions and limits (``assembly``);
- the view: authentication, origins, body limits, graphql-transport-ws and graphql-sse
  (``view``), GraphiQL and the web page (``graphiql``, ``webui``);
- the shared execution of identical snapshot subscriptions (``fanout``, ``fanout_members``);
- the compiled path: plain-field operations rendered and mutations' arguments converted
  without GraphQL execution (``render``, ``arguments``, ``plans``), and the executor with
  graphql-core's per-event memo reset and its gather that cancels no field before it
  starts (``execution``).

What the rest of turnqueue (the composition root, the CLI) uses is exported here; tests reach
the modules themselves. Strawberry's and graphql-core's non-public names come through
:mod:`turnqueue.graphql_internals` only. See docs/architecture.md.
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
