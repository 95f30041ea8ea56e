"""Compiled payloads: an operation's selection rendered straight from the value its root field
yields, without running GraphQL for every event.

When every field an operation selects is a plain data field (Strawberry's *basic* field: no
resolver, no field extension), its result is a pure function of the object: each response key
takes the field's attribute (through the field's own default resolver), leaves are coerced as the
executor coerces them (``coerce_output_value``), lists and objects recurse. A :class:`Root` is
that function, built once per document and shared by every set of variables.

Compiled: one operation of one root field; aliases, merged when a response key repeats; inline
fragments and fragment spreads on the selected type itself; ``__typename``; ``@skip`` and
``@include`` on literals. Anything else is not compiled (``compile_root`` answers None) and takes
graphql-core's execution. Both give the same frames (``tests/api/test_api_render.py``).

Hazard: a value the type does not allow (``None`` for a non-null field) would be an error in the
executor's result (null propagation); here it raises :class:`Unrenderable`, which the fan-out
treats as a fault (logged, masked, the subscription ends). The domain never yields one.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from graphql import (
    ASTValidationRule,
    DocumentNode,
    FieldNode,
    FragmentDefinitionNode,
    GraphQLError,
    GraphQLField,
    GraphQLIncludeDirective,
    GraphQLList,
    GraphQLNonNull,
    GraphQLObjectType,
    GraphQLOutputType,
    GraphQLSchema,
    GraphQLSkipDirective,
    OperationDefinitionNode,
    OperationType,
    SelectionNode,
    VariableNode,
    get_operation_ast,
    is_leaf_type,
    parse,
    specified_rules,
)
from graphql.execution import VariableValues, get_argument_values, get_directive_values
from graphql.execution import get_variable_values as coerce_variables

from turnqueue.graphql_internals import StrawberryField, validate_document
from turnqueue.resolvers.revisions import collect_fields, fragments_of

#: Strawberry's back-reference from a graphql-core field to its StrawberryField.
DEFINITION = "strawberry-definition"

Render = Callable[[Any], Any]


class Unrenderable(Exception):
    """A value its GraphQL type does not allow (see the module's hazard)."""


@dataclass(frozen=True, slots=True)
class Root:
    """The one root field of a compiled operation and the renderer of its value."""

    operation: OperationDefinitionNode
    parent: GraphQLObjectType  # the root type (Mutation, Subscription)
    field: GraphQLField
    nodes: list[FieldNode]  # the root field's node (one)
    response_key: str  # its alias, or its name
    render: Render
    fragments: Mapping[str, FragmentDefinitionNode]

    @property
    def name(self) -> str:
        return self.nodes[0].name.value

    def payload(self, value: object) -> str:
        """The ``next`` payload's JSON text for one value of the root field, as
        ``fanout.encode_payload`` encodes an execution result's ``{"data": …}``."""
        data = {self.response_key: self.render(value)}
        return json.dumps({"data": data}, separators=(",", ":"))

    def arguments(
        self, schema: GraphQLSchema, variables: Mapping[str, Any] | None
    ) -> tuple[VariableValues, dict[str, Any]] | None:
        """The variables coerced and the root field's argument values, or None when they do
        not coerce (nothing ran: the executor answers them)."""
        definitions = self.operation.variable_definitions or ()
        coerced = coerce_variables(schema, definitions, dict(variables or {}))
        if not isinstance(coerced, VariableValues):
            return None
        try:
            return coerced, get_argument_values(self.field, self.nodes[0], coerced)
        except GraphQLError:
            return None


def compile_text(
    schema: GraphQLSchema,
    text: str,
    operation_name: str | None,
    kind: OperationType,
    rules: Sequence[type[ASTValidationRule]],
    max_tokens: int | None = None,
) -> Root | None:
    """:func:`compile_root` of ``text``, parsed and validated as Strawberry validates an
    operation (graphql-core's rules, then ``rules``: the schema's own,
    ``api.validation_rules``), or None for anything Strawberry's path refuses (it answers that
    itself) or the renderer does not do."""
    try:
        document = parse(text, max_tokens=max_tokens)
    except Exception:  # a syntax error, the token limit, a nesting deeper than the stack
        return None
    if validate_document(schema, document, (*specified_rules, *rules)):
        return None
    return compile_root(schema, document, operation_name, kind)


def compile_root(
    schema: GraphQLSchema,
    document: DocumentNode,
    operation_name: str | None,
    kind: OperationType,
) -> Root | None:
    """The root field of ``document``'s operation of ``kind`` (``document`` already validated
    against ``schema``) and its renderer, or None when the operation selects anything the
    renderer does not do (see the module's docstring). The result holds for any variables: an
    ``@skip``/``@include`` condition must be a literal."""
    operation = get_operation_ast(document, operation_name)
    parent = schema.get_root_type(kind)
    if operation is None or operation.operation is not kind or parent is None:
        return None
    fragments = fragments_of(document)
    compiler = _PayloadCompiler(fragments)
    roots = collect_fields([operation.selection_set], fragments, parent.name, _included)
    if roots is None or len(roots) != 1:
        return None
    ((key, nodes),) = roots.items()
    field = parent.fields.get(nodes[0].name.value)
    if field is None or len(nodes) != 1:
        return None
    render = compiler.value(field.type, nodes)
    if render is None:
        return None
    return Root(operation, parent, field, nodes, key, render, fragments)


class _PayloadCompiler:
    def __init__(self, fragments: Mapping[str, FragmentDefinitionNode]) -> None:
        self._fragments = fragments

    # -- values ------------------------------------------------------------------------------
    def value(self, type_: GraphQLOutputType, nodes: list[FieldNode]) -> Render | None:
        """The renderer of a value of ``type_`` selected by ``nodes``."""
        if isinstance(type_, GraphQLNonNull):
            inner = self.value(type_.of_type, nodes)
            if inner is None:
                return None
            return lambda value: _non_null(inner, value)
        if isinstance(type_, GraphQLList):
            item = self.value(type_.of_type, nodes)
            if item is None:
                return None
            return lambda value: None if value is None else [item(v) for v in value]
        if is_leaf_type(type_):
            coerce = type_.coerce_output_value
            return lambda value: None if value is None else _leaf(coerce, value)
        if isinstance(type_, GraphQLObjectType):
            render = self._object(type_, nodes)
            if render is None:
                return None
            return lambda value: None if value is None else render(value)
        return None  # an interface or a union: the executor resolves the runtime type

    def _object(self, type_: GraphQLObjectType, nodes: list[FieldNode]) -> Render | None:
        if type_.is_type_of is not None:
            return None  # a check that needs the executor's info
        sub_sets = [node.selection_set for node in nodes if node.selection_set is not None]
        grouped = collect_fields(sub_sets, self._fragments, type_.name, _included)
        if grouped is None:
            return None
        parts: list[tuple[str, Render]] = []
        for key, field_nodes in grouped.items():
            name = field_nodes[0].name.value
            if name == "__typename":
                parts.append((key, _constant(type_.name)))
                continue
            field = type_.fields.get(name)
            if field is None or any(node.arguments for node in field_nodes):
                return None
            definition = field.extensions.get(DEFINITION)
            if not isinstance(definition, StrawberryField) or not definition.is_basic_field:
                return None  # a resolver (or an extension): only the executor runs it
            below = self.value(field.type, field_nodes)
            if below is None:
                return None
            parts.append((key, _attribute(definition, below)))

        def render(value: object) -> dict[str, Any]:
            return {key: part(value) for key, part in parts}

        return render


def _included(node: SelectionNode) -> bool | None:
    """``@skip``/``@include`` with a literal condition, as the executor reads them; None for a
    condition on a variable or any other directive."""
    directives = node.directives or ()
    if any(d.name.value not in ("skip", "include") for d in directives):
        return None
    if any(isinstance(a.value, VariableNode) for d in directives for a in d.arguments or ()):
        return None  # compiled for any variables: only literal conditions
    skip = get_directive_values(GraphQLSkipDirective, node)
    if skip is not None and skip["if"] is True:
        return False
    include = get_directive_values(GraphQLIncludeDirective, node)
    return not (include is not None and include["if"] is False)


def _attribute(field: StrawberryField, render: Render) -> Render:
    # The field's own default resolver (getattr unless the schema configures another), as
    # Strawberry's resolver of a basic field calls it.
    resolve, name = field.default_resolver, field.python_name
    return lambda source: render(resolve(source, name))


def _constant(value: str) -> Render:
    return lambda _source: value


def _non_null(render: Render, value: object) -> Any:
    if value is None:
        raise Unrenderable("null for a non-null field")
    return render(value)


def _leaf(coerce: Callable[[Any], Any], value: object) -> Any:
    coerced = coerce(value)
    if coerced is None:
        raise Unrenderable(f"{value!r} has no output value")
    return coerced
