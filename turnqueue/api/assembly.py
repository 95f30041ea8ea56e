"""Assembles the Strawberry ``Schema``: roots, scalars, limits (S3) and error masking.

Extensions are passed as classes or factories so each request gets fresh instances (the caches
they use are shared at module level). The printed SDL is sorted (``sort_schema``) so
``schema.graphql`` is deterministic (U1); the served schema is not (see ``build_schema``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from typing import Any, cast

import strawberry
from graphql import ASTValidationRule, GraphQLError, NoSchemaIntrospectionCustomRule
from strawberry.exceptions import MissingQueryError
from strawberry.extensions import (
    AddValidationRules,
    MaskErrors,
    MaxAliasesLimiter,
    MaxTokensLimiter,
    ParserCache,
    QueryDepthLimiter,
    SchemaExtension,
    ValidationCache,
)
from strawberry.schema.config import StrawberryConfig
from strawberry.types import ExecutionContext

from turnqueue.api.execution import TurnqueueExecutionContext, install
from turnqueue.graphql_internals import (
    CannotGetOperationTypeError,
    InvalidOperationTypeError,
    OperationType,
    StreamResult,
)
from turnqueue.resolvers.context import Context, FreshReads
from turnqueue.resolvers.mutations import Mutation
from turnqueue.resolvers.queries import Query
from turnqueue.resolvers.subscriptions import Subscription
from turnqueue.schema.items import ITEM_TYPES
from turnqueue.schema.scalars import SCALAR_MAP
from turnqueue.settings import Settings

log = logging.getLogger("turnqueue.api.assembly")

MASKED_MESSAGE = "Unexpected error."


#: Strawberry's own refusals of a request (no query, wrong operation type): clear, not faults.
REQUEST_ERRORS = (MissingQueryError, CannotGetOperationTypeError, InvalidOperationTypeError)


def is_unexpected(error: GraphQLError) -> bool:
    """A fault (masked) as opposed to a GraphQL error raised on purpose or by validation."""
    original = error.original_error
    return original is not None and not isinstance(original, (GraphQLError, *REQUEST_ERRORS))


class TurnqueueSchema(strawberry.Schema):
    async def stream(
        self,
        query: str | None,
        variable_values: dict[str, Any] | None = None,
        context_value: Any | None = None,
        root_value: Any | None = None,
        operation_name: str | None = None,
        operation_extensions: dict[str, Any] | None = None,
        allowed_operation_types: Iterable[OperationType] | None = None,
    ) -> StreamResult:
        """A snapshot subscription over a WebSocket reads the results of the execution its
        identical subscriptions share (``Context.share``: the app's fan-out); anything else is
        Strawberry's own stream."""
        context = context_value if isinstance(context_value, Context) else None
        if context and context.share and query is not None and allowed_operation_types is None:
            shared = context.share(context, query, variable_values, operation_name)
            if shared is not None:
                return cast("StreamResult", shared)
        return await super().stream(
            query,
            variable_values,
            context_value,
            root_value,
            operation_name,
            operation_extensions,
            allowed_operation_types,
        )

    def process_errors(
        self, errors: list[GraphQLError], execution_context: ExecutionContext | None = None
    ) -> None:
        # Faults are logged with their traceback here, before MaskErrors hides them (S3);
        # errors meant for the client (validation, NOT_FOUND, RESYNC) are not server problems.
        for error in errors:
            if is_unexpected(error):
                original = error.original_error
                exc_info = (type(original), original, original.__traceback__) if original else None
                log.error(
                    "unexpected error at %s: %s", error.path, error.message, exc_info=exc_info
                )
            else:
                log.debug("GraphQL error: %s", error.message)


class SubscriptionsNeedAStream(SchemaExtension):
    """S3: a subscription in a plain HTTP request (no graphql-sse ``Accept``) is refused with
    Strawberry's own 400 (``InvalidOperationTypeError``) before anything runs.

    Hazard (Strawberry 0.341.2): it allows subscriptions on every GET and POST and, when the
    request asks for no stream, executes one as a query: a fault. Hence SUBSCRIPTION is taken out
    of the allowed types before parsing (docs/upstream/strawberry-http-body.md)."""

    def on_operation(self) -> Iterator[None]:
        execution = self.execution_context
        if isinstance(execution.context, Context) and execution.context.plain_http:
            allowed = set(execution.allowed_operations) - {OperationType.SUBSCRIPTION}
            execution.allowed_operations = allowed
        yield


def validation_rules(settings: Settings) -> list[type[ASTValidationRule]]:
    """The rules every operation is validated with besides graphql-core's own: the depth and
    alias limits (S3) and, when introspection is off, the rule that refuses it (also for the
    operations the fan-out and the plans compile)."""
    # Built once per schema: the per-operation extensions make a new rule *class* per
    # operation, a new key in every ValidationCache.
    rules: list[type[ASTValidationRule]] = [
        *QueryDepthLimiter(max_depth=settings.max_query_depth).validation_rules,
        *MaxAliasesLimiter(max_alias_count=settings.max_aliases).validation_rules,
    ]
    if not settings.introspection:
        rules.append(NoSchemaIntrospectionCustomRule)  # what DisableIntrospection adds
    return rules


def build_schema(
    settings: Settings, *, sort: bool = False, rules: list[type[ASTValidationRule]] | None = None
) -> strawberry.Schema:
    """The served schema.

    Hazard (Strawberry 0.341.2): ``sort_schema=True`` rebuilds the graphql-core schema with plain
    ``GraphQLEnumType``s, so enum *inputs* then reach resolvers as bare strings instead of enum
    members (``scope is SendNowScope.ENTRY`` fails). The served schema is therefore not sorted;
    only the printed SDL is (``print_schema_sdl``), which is what needs to be deterministic.
    """
    install()  # graphql-core's gather cancels no field before it starts (api/execution.py)
    rules = validation_rules(settings) if rules is None else rules
    return TurnqueueSchema(
        query=Query,
        mutation=Mutation,
        subscription=Subscription,
        types=ITEM_TYPES,  # the TurnItem implementations (A3)
        extensions=[  # classes or factories (see the module docstring)
            SubscriptionsNeedAStream,
            lambda: MaxTokensLimiter(max_token_count=settings.max_tokens),
            lambda: ParserCache(maxsize=256),
            lambda: AddValidationRules(rules),
            lambda: ValidationCache(maxsize=256),
            FreshReads,
            lambda: MaskErrors(should_mask_error=is_unexpected, error_message=MASKED_MESSAGE),
        ],
        config=StrawberryConfig(sort_schema=sort, scalar_map=SCALAR_MAP),
        # A fresh sub-field memo per subscription event: graphql-core's grows forever (P7).
        execution_context_class=TurnqueueExecutionContext,
    )


def print_schema_sdl() -> str:
    """The sorted SDL of the contract, as committed in ``schema.graphql`` (U1)."""
    return build_schema(Settings(), sort=True).as_str() + "\n"
