"""GraphQL over Server-Sent Events (O3): Strawberry's graphql-sse transport, with an SSE ``id``.

Strawberry 0.341 serves graphql-sse in its *distinct connections* mode: each subscription is
its own HTTP request (``GET /graphql?query=…&variables=…`` or ``POST`` with
``Accept: text/event-stream``) and its own event stream (``event: next`` … ``event: complete``).
That is the mode resume needs: the request carries the whole operation, so a reconnect (a
browser ``EventSource`` repeats the same URL and adds ``Last-Event-ID``) runs it again, and
the resolver reads ``Last-Event-ID`` from the request (``turnOutput``: ``<turnId>:<offset>``).
The *single connection* mode (reservations, operations over a separate POST) is not offered by
Strawberry and is not needed.

Strawberry's events carry no ``id``. Each subscription stream sets ``Context.event_id`` right
before it yields (the offset after a ``turnOutput`` chunk, the revision of a snapshot); the view's
``process_result`` (run in the same task, between that yield and the next) moves it into the
response under :data:`EVENT_ID_KEY`, and :class:`IdentifiedSSETransport` writes it as the
event's ``id:`` line and drops it from the JSON.

The request passes the same checks as any GraphQL HTTP request before it gets here
(``turnqueue.api.view``: the ``Authorization`` header, S1; the ``Origin``, S4). A browser's
``EventSource`` cannot send headers, so with tokens configured a page uses a fetch-based SSE
client (such as the ``graphql-sse`` package); without tokens (local use) ``EventSource`` works.
"""

from __future__ import annotations

from typing import Any, cast

from strawberry.http import GraphQLHTTPResponse

from turnqueue.graphql_internals import JSONEncoder, SSETransport

#: The private response key that carries an event's SSE id from the view to the transport.
EVENT_ID_KEY = "__turnqueue_sse_id"


def attach_event_id(response: GraphQLHTTPResponse, event_id: str) -> None:
    cast(dict[str, Any], response)[EVENT_ID_KEY] = event_id


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
