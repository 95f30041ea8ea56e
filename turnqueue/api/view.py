"""The GraphQL view: authentication (S1), origins (S4), body size and GraphQL-shaped refusals (S3).

HTTP: ``Authorization: Bearer <token>`` (a static token or a JWT, :mod:`turnqueue.auth`) on every
GraphQL request but the GraphiQL page (a browser's GET with no query). Refusals (a missing or
wrong token, an oversized body, malformed JSON, a JSON body that is no object, a subscription in
a request that asks for no stream) answer GraphQL JSON ``{"errors": [...]}``.

WebSocket: the token comes in the ``connection_init`` payload ``{"authorization": "Bearer …"}``
(refused: close 4403); cross-origin handshakes are refused unless the origin is in
``allowed_origins`` (Strawberry's own check); every message is held to the HTTP body limit
(:class:`MessageLimit`); identical snapshot subscriptions share one execution
(:mod:`turnqueue.api.fanout`).

GraphQL over SSE (O3), graphql-sse's *distinct connections* mode: each subscription is its own
request, so a reconnect (``EventSource`` repeats the URL with ``Last-Event-ID``) runs the
operation again and its resolver reads the header. Strawberry's events carry no ``id``: a stream
sets ``Context.event_id`` right before it yields, ``process_result`` (in the same task) moves it
into the response under :data:`EVENT_ID_KEY`, and :class:`IdentifiedSSETransport` writes it as
the event's ``id:`` line.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from typing import Any, cast

from cross_web import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.types import Message, Receive, Scope, Send
from starlette.websockets import WebSocket
from strawberry.asgi import GraphQL
from strawberry.exceptions import ConnectionRejectionError
from strawberry.http import GraphQLHTTPResponse
from strawberry.schema import BaseSchema
from strawberry.subscriptions import GRAPHQL_SSE_PROTOCOL, GRAPHQL_TRANSPORT_WS_PROTOCOL
from strawberry.types import ExecutionResult

from turnqueue.api.fanout import FanOut
from turnqueue.api.fanout_member import quiet_disconnects, shared_frame
from turnqueue.api.graphiql import page_html
from turnqueue.api.plans import Plans
from turnqueue.auth import LOCAL_PRINCIPAL as LOCAL_PRINCIPAL  # re-exported (bench, tests)
from turnqueue.auth import Authenticator as Authenticator
from turnqueue.engine import Engine
from turnqueue.errors import AuthenticationError
from turnqueue.graphql_internals import (
    BaseView,
    HTTPStreamTransport,
    InvalidOperationTypeError,
    JSONEncoder,
    OperationType,
    SSETransport,
    UnsetType,
    is_same_origin,
    normalize_origin,
)
from turnqueue.resolvers.context import Context
from turnqueue.settings import Settings

log = logging.getLogger(__name__)

PRINCIPAL_KEY = "turnqueue.principal"
CONTEXT_KEY = "turnqueue.context"


def graphql_error(
    message: str, status_code: int, code: str, headers: Mapping[str, str] | None = None
) -> JSONResponse:
    body = {"errors": [{"message": message, "extensions": {"code": code}}]}
    return JSONResponse(body, status_code=status_code, headers=headers)


def _www_authenticate(request: Request, refused: AuthenticationError) -> str:
    """RFC 6750 §3: ``invalid_token`` with the reason when a token was presented."""
    if not request.headers.get("authorization"):
        return "Bearer"
    reason = str(refused).replace('"', "'")
    return f'Bearer error="invalid_token", error_description="{reason}"'


async def _read_body(request: Request, limit: int) -> bytes | None:
    """The request's body, or None when it is larger than ``limit`` bytes (as declared, or as
    read: the rest is not read)."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        return None
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            break
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


#: S3: what a request that runs a subscription without asking for a stream is told.
NEEDS_A_STREAM = (
    "a subscription needs a stream: GraphQL over SSE (`Accept: text/event-stream`) or "
    "graphql-transport-ws over a WebSocket"
)
#: S3: graphql-transport-ws's Bad Request, for a message larger than the body limit.
TOO_LARGE_CLOSE = 4400


def _media_type(request: Request) -> str:
    return request.headers.get("content-type", "").partition(";")[0].strip().lower()


#: The body of a request that is no JSON POST, or is malformed (Strawberry refuses it).
NOT_JSON = object()


def _posted_json(request: Request, body: bytes) -> object:
    """The JSON a POST carries (Strawberry's test: ``application/json`` in the media type)."""
    if request.method != "POST" or "application/json" not in _media_type(request):
        return NOT_JSON
    try:
        data: object = json.loads(body)
    except ValueError:
        return NOT_JSON
    return data


class MessageLimit:
    """S3: every WebSocket message held to the HTTP body limit before anything parses it
    (uvicorn's own is 16 MiB), by wrapping the socket's ASGI ``receive`` and ``send``.

    A message over ``limit`` bytes closes the socket with 4400 and the reason, and the
    application is handed a disconnect (Strawberry cleans up as for a client that left; what it
    sends then is dropped). 4400 is graphql-transport-ws's Bad Request, which graphql-ws reports
    at once; a code it does not know, such as 4413, it retries with the same message."""

    def __init__(self, receive: Receive, send: Send, limit: int) -> None:
        self._receive = receive
        self._send = send
        self._limit = limit
        self._closed = False

    async def receive(self) -> Message:
        message = await self._receive()
        if message["type"] == "websocket.receive" and self._too_large(message):
            reason = f"message larger than {self._limit} bytes"
            log.info("closed a WebSocket: %s", reason)
            await self._send({"type": "websocket.close", "code": TOO_LARGE_CLOSE, "reason": reason})
            self._closed = True
            return {"type": "websocket.disconnect", "code": TOO_LARGE_CLOSE}
        return message

    async def send(self, message: Message) -> None:
        if not self._closed:
            await self._send(message)

    def _too_large(self, message: Message) -> bool:
        data = message.get("bytes")
        if data is not None:
            return len(data) > self._limit
        text: str = message.get("text") or ""
        # At most 4 bytes a character: most messages are judged without encoding them.
        return len(text) * 4 > self._limit and len(text.encode()) > self._limit


#: The private response key that carries an event's SSE id from the view to the transport.
EVENT_ID_KEY = "__turnqueue_sse_id"


class IdentifiedSSETransport(SSETransport):
    """graphql-sse events with an ``id:`` line when the stream named one."""

    def encode_next(self, response: GraphQLHTTPResponse, encode_json: JSONEncoder) -> str:
        event_id = cast(dict[str, Any], response).pop(EVENT_ID_KEY, None)
        event = super().encode_next(response, encode_json)
        if event_id is None:
            return event
        if any(c in event_id for c in "\r\n\0"):  # unreachable: ids are built by the server
            raise ValueError("an SSE id must be one line")
        return f"id: {event_id}\r\n{event}"


def _replay(body: bytes) -> Receive:
    sent = False

    async def receive() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return {"type": "http.disconnect"}

    return receive


class TurnqueueGraphQL(GraphQL[Context, None]):
    #: O3: graphql-sse events carry an ``id``
    stream_transport_classes_by_protocol = {
        **BaseView.stream_transport_classes_by_protocol,
        GRAPHQL_SSE_PROTOCOL: IdentifiedSSETransport,
    }

    def __init__(
        self,
        schema: BaseSchema,
        settings: Settings,
        engine: Callable[[], Engine],
        fanout: FanOut | None = None,
        plans: Plans | None = None,
    ) -> None:
        super().__init__(
            schema,
            graphql_ide="graphiql",
            allowed_origins=settings.allowed_origins,
            # WebSocket: graphql-transport-ws only, its connection_init carries the token (S1).
            # HTTP: graphql-sse (O3), checked like every HTTP request (_handle_http).
            subscription_protocols=(GRAPHQL_TRANSPORT_WS_PROTOCOL, GRAPHQL_SSE_PROTOCOL),
            # Pings from the client are answered; subscriptions are bounded per socket.
            max_subscriptions_per_connection=100,
        )
        self.settings = settings
        #: the HTTP streams a request may ask for (graphql-sse): only they run subscriptions
        self._streams: list[HTTPStreamTransport] = [
            transport()
            for protocol in self.protocols
            if (transport := self.stream_transport_classes_by_protocol.get(protocol))
        ]
        self.auth = Authenticator.from_settings(settings)  # static tokens and JWTs (S1, S5)
        self._engine = engine
        #: None: every subscription executes on its own (Strawberry's ordinary path)
        self.fanout = fanout
        logging.getLogger("strawberry.ws.task").addFilter(quiet_disconnects)
        #: None: every HTTP operation is executed by Strawberry (turnqueue.api.plans)
        self.plans = plans
        #: The bundled GraphiQL (G2); None when unbuilt: Strawberry's CDN page, with a warning
        self.ide_html = page_html(auth_required=self.auth.enabled)

    async def render_graphql_ide(self, request: Request) -> Response:
        if self.ide_html is None:
            return await super().render_graphql_ide(request)
        return HTMLResponse(self.ide_html, headers={"Cache-Control": "no-cache"})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            response = await self._handle_http(scope, receive)
            await response(scope, receive, send)
            return
        if scope["type"] == "websocket":
            limited = MessageLimit(receive, send, self.settings.max_body_bytes)
            receive, send = limited.receive, limited.send
        await super().__call__(scope, receive, send)

    async def _handle_http(self, scope: Scope, receive: Receive) -> Response:
        request = Request(scope, receive)
        if not self._origin_allowed(request):
            return graphql_error(
                "cross-origin request from an origin not allowed", 403, "FORBIDDEN"
            )
        # GraphiQL's page needs no token: the test Strawberry applies before rendering it.
        if not self.should_render_graphql_ide(self.request_adapter_class(request)):
            try:
                principal = self.auth.authenticate(request.headers.get("authorization"))
            except AuthenticationError as refused:
                return graphql_error(
                    str(refused),
                    401,
                    "UNAUTHENTICATED",
                    {"WWW-Authenticate": _www_authenticate(request, refused)},
                )
            scope.setdefault("state", {})[PRINCIPAL_KEY] = principal
        limit = self.settings.max_body_bytes
        body = await _read_body(request, limit)
        if body is None:
            return graphql_error(
                f"request body is larger than {limit} bytes", 413, "BODY_TOO_LARGE"
            )
        data = _posted_json(request, body)
        if data is not NOT_JSON and not isinstance(data, dict | list):
            # Strawberry 0.341.2 reads such a body as an object: an AttributeError, a bare 500
            # that closed the connection (docs/upstream/strawberry-http-body.md).
            return graphql_error(
                'the request body must be a JSON object (one GraphQL request: {"query": …})',
                400,
                "BAD_REQUEST",
            )
        planned = await self._planned(request, data)
        if planned is not None:
            return planned
        try:
            return await self.run(Request(scope, _replay(body)))
        except HTTPException as e:
            no_stream = InvalidOperationTypeError(OperationType.SUBSCRIPTION)
            if e.reason == no_stream.as_http_error_reason(request.method):
                return graphql_error(NEEDS_A_STREAM, e.status_code, "BAD_REQUEST")
            return graphql_error(e.reason, e.status_code, "BAD_REQUEST")

    async def _planned(self, request: Request, data: object) -> Response | None:
        """A JSON POST of a mutation that has a plan (``turnqueue.api.plans``), answered without
        GraphQL execution; None: anything else, which Strawberry's view answers."""
        if self.plans is None or _media_type(request) != "application/json":
            return None
        if not isinstance(data, dict):
            return None
        query, variables, name = data.get("query"), data.get("variables"), data.get("operationName")
        if not isinstance(query, str) or not isinstance(name, str | None):
            return None
        if not isinstance(variables, dict | None) or (plan := self.plans.get(query, name)) is None:
            return None
        result = await plan.run(variables, await self.get_context(request, None))
        if result is None:
            return None
        return Response(self.encode_json(result), media_type="application/json")

    def _origin_allowed(self, request: Request) -> bool:
        """S4 for HTTP, by the same rule Strawberry applies to WebSocket handshakes."""
        origin = request.headers.get("origin")
        if origin is None or request.headers.get("sec-fetch-site") == "same-origin":
            return True
        if is_same_origin(origin, request.headers.get("host")) or "*" in self.allowed_origins:
            return True
        return normalize_origin(origin) in self.allowed_origins

    async def get_context(self, request: Request | WebSocket, response: Any) -> Context:
        principal = request.scope.get("state", {}).get(PRINCIPAL_KEY)
        context = Context(
            engine=self._engine(), principal=principal, request=request, response=response
        )
        if isinstance(request, Request):  # one operation per request: process_result reads it
            request.scope.setdefault("state", {})[CONTEXT_KEY] = context
            accept = request.headers.get("accept", "")
            context.plain_http = not any(stream.accepts(accept) for stream in self._streams)
        elif self.fanout is not None:  # a WebSocket: its snapshot subscriptions are shared
            context.share = self.fanout.share
        return context

    def encode_json(self, data: object) -> str | bytes:
        """A shared ``next`` payload is written as its group encoded it (once for every
        member); anything else as Strawberry encodes it."""
        frame = shared_frame(data)
        return super().encode_json(data) if frame is None else frame

    async def process_result(
        self, request: Request, result: ExecutionResult
    ) -> GraphQLHTTPResponse:
        response = await super().process_result(request, result)
        context = request.scope.get("state", {}).get(CONTEXT_KEY)
        if isinstance(context, Context) and context.event_id is not None:
            # An SSE event (O3): the id its stream set just before yielding this result.
            cast(dict[str, Any], response)[EVENT_ID_KEY] = context.event_id
            context.event_id = None
        return response

    async def on_ws_connect(self, context: Context) -> UnsetType | dict[str, object] | None:
        params = context.connection_params or {}
        try:
            principal = self.auth.authenticate(params.get("authorization"))
        except AuthenticationError as refused:
            # graphql-transport-ws closes with 4403 "Forbidden" and carries no reason: log it.
            log.info("refused a WebSocket: %s", refused)
            raise ConnectionRejectionError({"message": str(refused)}) from None
        context.principal = principal
        return await super().on_ws_connect(context)
