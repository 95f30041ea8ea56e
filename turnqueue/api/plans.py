"""Compiled HTTP mutations: the root field's own resolver called directly, its payload rendered
without GraphQL execution (bench P4).

A :class:`Plan` does once per distinct document what can be done once: parse (with the token
limit), validate (with the schema's rules, :func:`turnqueue.api.validation_rules`), find the root
field, compile the payload's renderer (:mod:`turnqueue.api.render`). Per request it coerces the
variables (graphql-core's ``get_variable_values``), calls the root field's resolver as Strawberry
does (its arguments converted to input types, its ``Info``: :mod:`turnqueue.api.arguments`), and
renders the result.

Only a mutation of one root field whose payload selects basic fields is planned
(:func:`turnqueue.api.render.compile_root`); anything else, and any request whose variables do
not coerce, takes Strawberry's path before anything ran. The answer is what that path answers:
``{"data": …}``, or for a fault the error located at the field, logged by the schema and masked
as ``MaskErrors`` masks it (S3). ``tests/api/test_api_plans.py`` compares both paths on every
mutation.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from graphql import (
    ASTValidationRule,
    GraphQLError,
    GraphQLResolveInfo,
    OperationType,
    is_non_null_type,
    located_error,
)
from graphql.pyutils import Path, is_awaitable
from strawberry import Schema

from turnqueue.api.arguments import Call, compile_call
from turnqueue.api.assembly import MASKED_MESSAGE, is_unexpected
from turnqueue.api.render import DEFINITION, Root, compile_text


@dataclass(frozen=True, slots=True)
class Plan:
    """One mutation document, compiled (see the module's docstring)."""

    schema: Schema
    root: Root
    call: Call

    async def run(self, variables: dict[str, Any] | None, context: object) -> dict[str, Any] | None:
        """The response body, or None when the variables do not coerce (nothing ran: the
        ordinary path answers them)."""
        root = self.root
        graphql_schema = self.schema._schema
        bound = root.arguments(graphql_schema, variables)
        if bound is None:
            return None
        coerced, arguments = bound
        path = Path(None, root.response_key, root.parent.name)
        info: GraphQLResolveInfo[Any] = GraphQLResolveInfo(
            field_name=root.name,
            field_nodes=root.nodes,
            return_type=root.field.type,
            parent_type=root.parent,
            path=path,
            schema=graphql_schema,
            fragments=dict(root.fragments),
            root_value=None,  # Strawberry's HTTP view gives none
            operation=root.operation,
            variable_values=coerced,
            context=context,
            is_awaitable=is_awaitable,
            abort_signal=None,
            async_helpers=None,  # type: ignore[arg-type]  # the resolver is called directly
        )
        try:
            result = self.call(None, info, arguments)  # as Strawberry's resolver wrapper does
            if inspect.isawaitable(result):
                result = await result
            return {"data": {root.response_key: root.render(result)}}
        except Exception as fault:
            return self._error(fault, path)

    def _error(self, fault: Exception, path: Path) -> dict[str, Any]:
        """As graphql-core and Strawberry answer a resolver's exception: located at the field,
        logged (``TurnqueueSchema.process_errors``) and, when unexpected, masked (S3)."""
        error = located_error(fault, self.root.nodes, path.as_list())
        self.schema.process_errors([error])
        if is_unexpected(error):  # what MaskErrors does with it
            error = GraphQLError(
                MASKED_MESSAGE,
                nodes=error.nodes,
                source=error.source,
                positions=error.positions,
                path=error.path,
            )
        data = None if is_non_null_type(self.root.field.type) else {self.root.response_key: None}
        return {"data": data, "errors": [error.formatted]}


class Plans:
    """The plans of one schema, by document (bounded: the documents come from clients)."""

    def __init__(
        self, schema: Schema, rules: Sequence[type[ASTValidationRule]], max_tokens: int
    ) -> None:
        self._schema = schema
        self._rules = rules
        self._max_tokens = max_tokens
        self.get = lru_cache(maxsize=256)(self._plan)

    def _plan(self, query: str, operation_name: str | None) -> Plan | None:
        """The plan of a mutation document, or None: Strawberry's path runs it."""
        schema, kind = self._schema._schema, OperationType.MUTATION
        root = compile_text(schema, query, operation_name, kind, self._rules, self._max_tokens)
        if root is None:
            return None
        call = compile_call(self._schema, root.field.extensions[DEFINITION])
        return None if call is None else Plan(self._schema, root, call)
