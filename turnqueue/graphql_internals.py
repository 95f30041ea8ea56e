"""The one door to Strawberry's and graphql-core's non-public modules: every name turnqueue takes
from them, and why.

Everything else in turnqueue imports only their public modules (``strawberry``,
``strawberry.types``, ``strawberry.http``, ``strawberry.extensions``, …; ``graphql`` and its
subpackages), and ``tests/test_imports.py`` keeps it so. An upgrade of either library therefore
starts here: the names below are the whole surface that may move without notice. pyproject.toml's
ranges end before the next minor release of each; ``scripts/newest_graphql.py`` (run by
``.ci/run``) tests the API on the newest versions they allow, and the tests named beside each group
compare turnqueue's answer with Strawberry's own.

- **graphql-transport-ws** (``api.assembly``, ``api.fanout``): identical
  snapshot subscriptions share one execution. ``TurnqueueSchema.stream`` (Strawberry's public
  ``Schema.stream``, overridden) hands such an operation the results of its group, typed as
  Strawberry's ``StreamResult``; a refusal is its first result, a ``PreExecutionError``, as
  Strawberry's own stream answers it. A client gone while being sent to raises
  ``WebSocketDisconnected``, as Strawberry's adapter does. Frames compared with Strawberry's
  path: tests/api/test_api_fanout.py.
- **HTTP streams** (``api.view``): graphql-sse events carry an ``id:`` line (O3), so
  the view registers a subclass of Strawberry's ``SSETransport`` in its transports by protocol
  (``BaseView.stream_transport_classes_by_protocol``). tests/ops/test_output_sse_resume.py.
- **Request refusals** (``api.assembly``, ``api.view``): a subscription over a plain POST and an
  operation of the wrong type are refused as Strawberry refuses them (``InvalidOperationTypeError``,
  ``CannotGetOperationTypeError``, ``OperationType``); the HTTP origin check is Strawberry's
  WebSocket one (``is_same_origin``, ``normalize_origin``, S4).
- **The executor** (``api.execution``): Strawberry's execution context, with graphql-core's
  per-event memo reset (docs/upstream/graphql-core-subscription-memo.md; canary:
  tests/api/test_api_subscription_memory.py).
- **Cancelled fields** (``api.execution``): graphql-core's executor gathers sibling fields and
  list items with ``gather_with_cancel``, a name its module ``graphql.execution.executor`` binds
  at import; turnqueue rebinds it there to a version that lets every task start before it is
  cancelled (docs/upstream/graphql-core-cancel-before-start.md). tests/api/test_api_execution.py.
- **Compiled operations** (``api.render``, ``api.plans``): a plain-field operation is rendered
  from the resolver's value and a mutation's arguments converted once per field, so they read
  Strawberry's type definitions (fields, lists, optionals, enums, scalars) and validate with
  Strawberry's own rules (``validate_document``). Compared with Strawberry's and graphql-core's
  answers: tests/api/test_api_render.py, test_api_arguments.py, test_api_plans.py.
- **Type annotations** (``schema.scalars``, ``schema.enums``, ``api.view``): what
  ``strawberry.scalar`` and ``strawberry.enum`` return, and ``on_ws_connect``'s ``UnsetType``.
"""

from __future__ import annotations

from graphql.execution import executor as graphql_executor
from strawberry.http.base import BaseView
from strawberry.http.exceptions import WebSocketDisconnected
from strawberry.http.streaming import HTTPStreamTransport, JSONEncoder, SSETransport
from strawberry.http.websocket_origin import is_same_origin, normalize_origin
from strawberry.schema.exceptions import CannotGetOperationTypeError, InvalidOperationTypeError
from strawberry.schema.schema import (
    StrawberryGraphQLCoreExecutionContext,
    StreamResult,
    validate_document,
)
from strawberry.types.base import StrawberryList, StrawberryMaybe, StrawberryOptional
from strawberry.types.enum import StrawberryEnumDefinition, has_enum_definition
from strawberry.types.execution import PreExecutionError
from strawberry.types.field import StrawberryField
from strawberry.types.graphql import OperationType
from strawberry.types.scalar import ScalarDefinition
from strawberry.types.unset import UnsetType

__all__ = [
    "BaseView",
    "CannotGetOperationTypeError",
    "HTTPStreamTransport",
    "InvalidOperationTypeError",
    "JSONEncoder",
    "OperationType",
    "PreExecutionError",
    "SSETransport",
    "ScalarDefinition",
    "StrawberryEnumDefinition",
    "StrawberryField",
    "StrawberryGraphQLCoreExecutionContext",
    "StrawberryList",
    "StrawberryMaybe",
    "StrawberryOptional",
    "StreamResult",
    "UnsetType",
    "WebSocketDisconnected",
    "graphql_executor",
    "has_enum_definition",
    "is_same_origin",
    "normalize_origin",
    "validate_document",
]
