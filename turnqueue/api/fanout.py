"""Identical snapshot subscriptions over WebSockets share one execution.

Subscriptions with the same normalised document, variables, operation name and principal form a
*group*: its source runs once and every *member* (:class:`Member`: the source Strawberry's
graphql-transport-ws handler reads, so the protocol and its limits stay Strawberry's) is sent the
same payload, encoded once. Strawberry writes a member's frames, the view's ``encode_json`` the
shared payload into each (:func:`shared_frame`); an idle member is written to at once
(:meth:`Member.offer`), without waking its task.

Only snapshot subscriptions selecting only fields that move with their revisions are grouped
(``resolvers.revisions``): every payload is a full state, so a late joiner is first sent the
newest one (R3) and a slow member may skip states a newer one replaces. Anything else takes
Strawberry's own path (``share`` answers None).

A group whose operation selects only plain fields is *compiled* (``turnqueue.api.render``): it
consumes its stream's values and renders each payload itself, a feed (``resolvers/feeds.py``)
pushing them from inside ``publish`` (the group then holds no task), ``sessionChanged`` read by
the group's lead task. Any other group's lead runs Strawberry's execution, which also answers a
refusal when a compiled group opens (NOT_FOUND, S2).

Ownership: the composition root creates the :class:`FanOut` and closes it in the lifespan. A lead
is cancelled, and a feed closed, when its group's last member leaves or the FanOut closes; a lead
runs in a context of its own, never the connection of the member that started it.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import logging
from collections.abc import AsyncGenerator, Sequence
from contextlib import aclosing
from functools import lru_cache
from typing import TYPE_CHECKING, Any, NamedTuple

from graphql import ASTValidationRule, GraphQLError, OperationType, parse, print_ast
from starlette.websockets import WebSocket
from strawberry import Schema
from strawberry.types import ExecutionResult

from turnqueue.api.assembly import MASKED_MESSAGE
from turnqueue.api.fanout_member import Member
from turnqueue.api.render import Root, compile_text
from turnqueue.graphql_internals import PreExecutionError
from turnqueue.resolvers.context import Context
from turnqueue.resolvers.feeds import Feed, resync_error
from turnqueue.resolvers.revisions import groupable
from turnqueue.resolvers.subscriptions import SNAPSHOTS, open_feed

if TYPE_CHECKING:
    from turnqueue.engine import Engine

log = logging.getLogger(__name__)


def encode_payload(result: ExecutionResult) -> str:
    """A ``next`` payload as Strawberry's ``Operation.send_next`` builds it, encoded as the view's
    default ``encode_json`` does."""
    payload: dict[str, object] = {"data": result.data}
    if result.errors:
        payload["errors"] = [error.formatted for error in result.errors]
    if result.extensions:
        payload["extensions"] = result.extensions
    return json.dumps(payload, separators=(",", ":"))


class GroupKey(NamedTuple):
    document: str  # normalised (printed) document
    variables: str  # JSON, sorted keys
    operation_name: str | None
    principal: str  # S2: a member only ever receives what its own principal may see


class FanOutStats(NamedTuple):
    groups: int
    members: int
    rendered: int  # groups whose payloads are rendered without GraphQL execution


class _Group:
    """Members sharing one source; a compiled group (``root``: its renderer) also consumes its
    stream (``emit``, ``fail``).

    Hazard: a feed calls ``emit`` and ``fail`` inside ``publish``, in the committing task (a
    mutation's, under its session's lock): they only schedule (``call_soon``, in order), so that
    task pays for no member's send."""

    __slots__ = ("fanout", "feed", "key", "last", "lead", "loop", "members", "root", "stopped")

    def __init__(self, fanout: FanOut, key: GroupKey, root: Root | None) -> None:
        self.fanout = fanout
        self.key = key
        self.root = root  # None: the lead executes the operation
        self.members: dict[Member, None] = {}  # an insertion-ordered set
        self.last: str | None = None  # the newest payload, replayed to a late joiner
        #: the task that runs the group's source (or, for a fed group, opens its feed)
        self.lead: asyncio.Task[None] | None = None
        self.feed: Feed[Any] | None = None  # a fed group's source once open
        self.stopped = False  # its source stopped: nothing more is offered to its members
        self.loop = asyncio.get_running_loop()

    def leave(self, member: Member) -> None:
        if member in self.members:  # not taken out already (a member that lagged)
            del self.members[member]
            if not self.members:
                self.fanout._stop(self)  # the last one left: nobody to serve

    def emit(self, value: object) -> None:
        self.loop.call_soon(self._offer, value)

    def fail(self, error: Exception | None = None) -> None:
        """The source ended (``error``: failed); scheduled after every value it emitted."""
        self.loop.call_soon(self._end, error)

    def _offer(self, value: object) -> None:
        if self.stopped:
            return
        assert self.root is not None
        try:
            payload = self.root.payload(value)
        except Exception as error:  # a state that cannot be rendered: as the stream's fault
            self._end(error)
            return
        self.fanout._deliver(self, payload, final=False)
        if not self.members:
            self.fanout._stop(self)  # every member was too slow: nobody left to serve

    def _end(self, error: Exception | None) -> None:
        """Its members are sent the failure, if any, then ``complete``."""
        if not self.stopped:
            if error is not None:
                self.fanout._deliver(self, self.fanout._failure(error), final=True)
            self.fanout._end(self)


class _Refused(Exception):
    """An operation answered with an ``error`` message instead of a stream."""

    def __init__(self, errors: list[GraphQLError]) -> None:
        self.errors = errors


#: An executed lead's payloads: each one's JSON text, and whether it is the last (an error)
Payloads = AsyncGenerator[tuple[str, bool], None]


class FanOut:
    """The registry of subscription groups of one app, and the owner of their lead tasks."""

    def __init__(
        self,
        schema: Schema,
        max_tokens: int,
        buffer: int,
        rules: Sequence[type[ASTValidationRule]],
        *,
        render: bool,
    ) -> None:
        """``rules``: ``api.validation_rules``; ``render=False``: every group executes."""
        self._schema = schema
        self._max_tokens = max_tokens
        self._buffer = buffer  # payloads a member may fall behind (Settings.subscriber_buffer)
        self._rules = rules
        self._render = render
        self._resync = encode_payload(ExecutionResult(data=None, errors=[resync_error()]))
        masked = ExecutionResult(data=None, errors=[GraphQLError(MASKED_MESSAGE)])
        self._masked = encode_payload(masked)
        self._groups: dict[GroupKey, _Group] = {}  # the groups newcomers join
        self._leads: set[asyncio.Task[None]] = set()  # every running lead, joinable or not
        self._closed = False
        # Bounded: the document text comes from clients.
        self._normalise = lru_cache(maxsize=256)(self._normalise_uncached)
        self._roots = lru_cache(maxsize=256)(self._root_uncached)

    def key(
        self, query: str, variables: object, operation_name: str | None, principal: str | None
    ) -> GroupKey | None:
        """The group of an operation, or None when it takes Strawberry's ordinary path."""
        if self._closed or principal is None or not isinstance(query, str):
            return None
        if variables is not None and not isinstance(variables, dict):
            return None
        normalised = self._normalise(query, operation_name)
        if normalised is None:
            return None
        try:
            variables_text = json.dumps(variables or {}, sort_keys=True, separators=(",", ":"))
        except (TypeError, ValueError):
            return None
        return GroupKey(normalised, variables_text, operation_name, principal)

    def _normalise_uncached(self, query: str, operation_name: str | None) -> str | None:
        try:
            document = parse(query, no_location=True, max_tokens=self._max_tokens)
            if not groupable(document, operation_name, SNAPSHOTS):
                return None
            return print_ast(document)
        except Exception:  # a syntax error, a token limit, a nesting deeper than the stack...
            return None  # Strawberry's own path answers it (close 4400 or an error message)

    def _compile(self, key: GroupKey) -> tuple[Root, str] | None:
        """The group's operation compiled (``turnqueue.api.render``) and its session, or None:
        it is executed (so are variables that do not coerce: the executor answers them)."""
        root = self._roots(key.document, key.operation_name) if self._render else None
        if root is None:
            return None
        bound = root.arguments(self._schema._schema, json.loads(key.variables))
        session_id = None if bound is None else bound[1].get("sessionId")
        return (root, session_id) if isinstance(session_id, str) else None

    def _root_uncached(self, document_text: str, operation_name: str | None) -> Root | None:
        """Validated as Strawberry validates it: nothing the ordinary path refuses is rendered."""
        schema, kind = self._schema._schema, OperationType.SUBSCRIPTION
        root = compile_text(schema, document_text, operation_name, kind, self._rules)
        return root if root is not None and root.name in SNAPSHOTS else None

    def share(
        self,
        context: Context,
        query: str,
        variables: dict[str, Any] | None,
        operation_name: str | None,
    ) -> Member | None:
        """A subscription served by its group: a new member, the source Strawberry reads and then
        closes (``TurnqueueSchema.stream``); None: the operation takes Strawberry's ordinary path.

        Hazard: the member joins its group here, and leaves it when Strawberry closes it. The
        handler enters its ``aclosing`` right after ``Schema.stream`` answers, with no await in
        between, so no member is left in a group unclosed."""
        key = self.key(query, variables, operation_name, context.principal)
        if key is None:
            return None
        websocket = context.request if isinstance(context.request, WebSocket) else None
        group = self._groups.get(key) or self._start(key, query, variables, context.engine)
        return Member(websocket, group)

    def _start(
        self, key: GroupKey, query: str, variables: dict[str, Any] | None, engine: Engine
    ) -> _Group:
        compiled = self._compile(key)
        group = _Group(self, key, None if compiled is None else compiled[0])
        # The lead's context is its own (no request, no connection): it outlives any member.
        context = Context(engine=engine, principal=key.principal)
        executed = self._executed(query, variables, key.operation_name, context)
        if compiled is None:
            lead = self._lead(group, executed)
        else:
            lead = self._consume(group, *compiled, context, executed)
        group.lead = asyncio.create_task(
            lead,
            name=f"turnqueue.api.fanout lead {key.variables[:120]}",
            context=contextvars.Context(),  # nothing inherited from the first member's task
        )
        self._leads.add(group.lead)
        group.lead.add_done_callback(self._leads.discard)
        self._groups[key] = group
        return group

    def _forget(self, group: _Group) -> None:
        """New subscribers then start a new group."""
        if self._groups.get(group.key) is group:
            del self._groups[group.key]

    def _stop(self, group: _Group) -> None:
        """The group's source stops: forgotten, its lead cancelled, its feed closed."""
        self._forget(group)
        group.stopped = True
        if group.lead is not None:
            group.lead.cancel()
        if group.feed is not None:
            group.feed.close()

    def _deliver(self, group: _Group, payload: str, final: bool) -> None:
        """Offer ``payload`` to every member; a member too slow for it leaves (RESYNC)."""
        group.last = payload
        if final:  # RESYNC or a fault: not a state to replay to newcomers
            self._forget(group)
        lagged = [m for m in group.members if not m.offer(payload, self._buffer, self._resync)]
        for member in lagged:
            del group.members[member]

    def _end(self, group: _Group) -> None:
        """The group ends: its source stopped, its members sent ``complete``."""
        self._stop(group)
        for member in group.members:
            member.finish(None)

    def _failure(self, error: Exception) -> str:
        """The last payload of a source that failed, as the ordinary execution sends it: a
        stream's own GraphQL error (RESYNC, R3) as it is; a fault logged as the schema logs one
        and masked as MaskErrors masks it (S3)."""
        if isinstance(error, GraphQLError):
            return encode_payload(ExecutionResult(data=None, errors=[error]))
        self._schema.process_errors([GraphQLError(str(error), original_error=error)])
        return self._masked

    async def _lead(self, group: _Group, payloads: Payloads) -> None:
        """Offer each payload to every member; ``complete`` (or ``error``) when it ends."""
        errors: list[GraphQLError] | None = None  # None: members get ``complete``
        try:
            async with aclosing(payloads):
                async for payload, final in payloads:
                    self._deliver(group, payload, final)
                    if not group.members:
                        return  # every member was too slow: nobody left to serve
        except _Refused as refused:
            errors = refused.errors
        except Exception:
            # As Strawberry's handler does for a failed operation: log it, then ``complete``.
            log.exception("subscription fan-out failed for %s", group.key.variables[:120])
        finally:
            self._forget(group)
            for member in group.members:
                member.finish(errors)

    async def _consume(
        self, group: _Group, root: Root, session_id: str, context: Context, executed: Payloads
    ) -> None:
        """A compiled group's lead: open its stream, the group its consumer. A feed then pushes
        each state from inside ``publish`` and the lead is done (bench P8); a pulled stream is
        read here. A refusal (NOT_FOUND, S2) is answered by the executed path."""
        snapshot = SNAPSHOTS[root.name]
        try:
            if snapshot.feed is not None:
                feed = snapshot.feed
                group.feed = await open_feed(feed, context, session_id, group.emit, group.fail)
                group.lead = None  # a fed group holds no task
                if group.stopped:
                    group.feed.close()  # it ended while it opened: nothing more comes
                return
            stream = await snapshot.open(context, session_id)
        except GraphQLError:
            await self._lead(group, executed)
            return
        except Exception as error:  # the snapshot read failed: as the executed stream's fault
            group.fail(error)
            return
        async with aclosing(stream):  # type: ignore[type-var]
            try:
                async for value in stream:
                    group.emit(value)
                    del value  # not kept while the stream waits (bench P5b)
            except Exception as error:
                group.fail(error)
            else:
                group.fail()

    async def _executed(
        self,
        query: str,
        variables: dict[str, object] | None,
        operation_name: str | None,
        context: Context,
    ) -> Payloads:
        """The payloads of the operation's ordinary execution (Strawberry's, graphql-core's)."""
        source = await self._schema.stream(
            query,
            variable_values=variables,
            context_value=context,
            root_value=None,
            operation_name=operation_name,
        )
        async with aclosing(source):
            first = True
            async for result in source:
                # As Strawberry's handler: an error before execution (validation, NOT_FOUND
                # from the resolver) is an ``error`` message. Those that make it close the
                # socket (syntax, unknown operation name) never reach a group.
                if first and isinstance(result, PreExecutionError):
                    raise _Refused(list(result.errors or ()))
                if not isinstance(result, ExecutionResult):  # incremental delivery
                    message = "Incremental delivery is not supported over graphql-transport-ws"
                    raise _Refused([GraphQLError(message)])
                first = False
                yield encode_payload(result), bool(result.errors)

    def stats(self) -> FanOutStats:
        """The groups open to newcomers and their members."""
        groups = self._groups.values()
        return FanOutStats(
            groups=len(groups),
            members=sum(len(g.members) for g in groups),
            rendered=sum(g.root is not None for g in groups),
        )

    def leads(self) -> list[asyncio.Task[None]]:
        return list(self._leads)

    async def aclose(self) -> None:
        """App shutdown: stop every lead and feed (their members are sent ``complete``)."""
        self._closed = True
        leads = self.leads()
        for lead in leads:
            lead.cancel()
        await asyncio.gather(*leads, return_exceptions=True)
        for group in list(self._groups.values()):
            self._end(group)
