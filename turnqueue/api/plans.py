"""Compiled HTTP mutations: the root field's own resolver called directly, its arguments
converted and its payload rendered without GraphQL execution (bench P4).

A :class:`Plan` does once per distinct document what can be done once: parse (with the token
limit), validate (with the schema's rules, :func:`turnqueue.api.validation_rules`), find the root
field, compile the payload's renderer (:mod:`turnqueue.api.render`) and the argument converters
(:class:`Call`: Strawberry's ``convert_arguments`` works out each input field's name, type and
generics on every call). Per request it coerces the variables, calls the resolver as Strawberry
does (``self``/``root``/``parent`` as the source, ``info`` as a Strawberry ``Info``) and renders
the result.

Only a mutation of one root field whose payload selects basic fields, and whose arguments are
optional and list types, leaves and input types without a ``from_input`` of their own, is
planned; anything else (``Maybe``, ``GlobalID``, a lazy type, a field with extensions, a schema
with exception handlers), and any request whose variables do not coerce, takes Strawberry's path
before anything ran. The answer is what that path answers: ``{"data": …}``, or for a fault the
error located at the field, logged by the schema and masked as ``MaskErrors`` masks it (S3).
``tests/api/test_api_plans.py`` and ``test_api_arguments.py`` compare both paths.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import MISSING, dataclass
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
from strawberry import UNSET, Schema
from strawberry.relay import GlobalID
from strawberry.scalars import is_scalar
from strawberry.schema.name_converter import NameConverter
from strawberry.types import has_object_definition

from turnqueue.api.assembly import MASKED_MESSAGE, is_unexpected
from turnqueue.api.render import DEFINITION, Root, compile_text
from turnqueue.graphql_internals import (
    StrawberryEnumDefinition,
    StrawberryField,
    StrawberryList,
    StrawberryMaybe,
    StrawberryOptional,
    has_enum_definition,
)

Convert = Callable[[Any], Any]


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


class Call:
    """One field's resolver with its arguments converted once per type, per call only what
    varies: ``cls(**kwargs)`` per input object, a copy per list, the value itself for a leaf."""

    def __init__(
        self, schema: Schema, field: StrawberryField, convert: dict[str, tuple[str, Convert]]
    ):
        self._schema = schema
        self._field = field
        self._convert = convert  # GraphQL argument name -> its Python name and converter
        resolver = field.base_resolver
        assert resolver is not None
        self._resolver = resolver

    def __call__(
        self, source: object, info: GraphQLResolveInfo[Any], values: Mapping[str, Any]
    ) -> Any:
        """The resolver's result for graphql-core's coerced argument ``values``."""
        kwargs = self.convert(values)
        args: list[Any] = []
        resolver = self._resolver
        if resolver.self_parameter:
            args.append(source)
        if parent := resolver.parent_parameter:
            kwargs[parent.name] = source
        if root := resolver.root_parameter:
            kwargs[root.name] = source
        if info_parameter := resolver.info_parameter:
            kwargs[info_parameter.name] = self._schema.config.info_class(
                _raw_info=info, _field=self._field
            )
        return self._field.get_result(source, info=None, args=args, kwargs=kwargs)

    def convert(self, values: Mapping[str, Any]) -> dict[str, Any]:
        """The resolver's keyword arguments for graphql-core's coerced argument ``values``
        (what Strawberry's ``convert_arguments`` answers)."""
        kwargs: dict[str, Any] = {}
        for graphql_name, value in values.items():
            if (target := self._convert.get(graphql_name)) is not None:
                python_name, convert = target
                kwargs[python_name] = convert(value)
        return kwargs


def compile_call(schema: Schema, field: StrawberryField) -> Call | None:
    """``field``'s compiled call, or None: Strawberry's own resolver wrapper calls it."""
    if field.base_resolver is None or field.extensions or schema.exception_handlers:
        return None
    compiler = _ArgumentCompiler(
        schema.schema_converter.scalar_registry, schema.config.name_converter
    )
    convert: dict[str, tuple[str, Convert]] = {}
    for argument in field.arguments:
        converter = compiler.converter(argument.type)
        if converter is None:
            return None
        graphql_name = schema.config.name_converter.from_argument(argument)
        convert[graphql_name] = (argument.python_name, converter)
    return Call(schema, field, convert)


class _ArgumentCompiler:
    def __init__(self, registry: Mapping[object, Any], names: NameConverter) -> None:
        self._registry = registry
        self._names = names

    def converter(self, type_: object) -> Convert | None:
        """``convert_argument`` for values of ``type_``, worked out once (None: a type it leaves
        to Strawberry, such as ``Maybe``, ``GlobalID`` or a lazy type)."""
        if isinstance(type_, StrawberryMaybe) or type_ is GlobalID:
            return None
        if isinstance(type_, StrawberryOptional):
            return self.converter(type_.of_type)  # None passes through every converter
        if isinstance(type_, StrawberryList):
            item = self.converter(type_.of_type)
            if item is _same:  # copied as Strawberry does: graphql-core shares a default list
                return _copy  # between requests
            if item is None:
                return None
            return lambda value: (
                value if value is None or value is UNSET else [item(v) for v in value]
            )
        leaf = isinstance(type_, StrawberryEnumDefinition) or has_enum_definition(type_)
        if leaf or is_scalar(type_, self._registry):
            return _same
        if has_object_definition(type_):
            return self._input(type_)
        return None

    def _input(self, type_: Any) -> Convert | None:
        definition = type_.__strawberry_definition__
        if definition.from_input is not None or not definition.is_input:
            return None
        # As Strawberry: an implicit None for every field without a default, then the values
        # given, each converted (graphql-core has checked the required ones are there).
        implicit = {
            f.python_name: None
            for f in definition.fields
            if f.default_value is MISSING and f.default_factory is MISSING
        }
        fields: list[tuple[str, str, Convert]] = []
        for field in definition.fields:
            converter = self.converter(field.resolve_type(type_definition=definition))
            if converter is None:
                return None
            fields.append((self._names.from_field(field), field.python_name, converter))

        def build(value: Any) -> Any:
            if value is None or value is UNSET:
                return value
            kwargs = dict(implicit)
            for graphql_name, python_name, converter in fields:
                if graphql_name in value:
                    kwargs[python_name] = converter(value[graphql_name])
            return type_(**kwargs)

        return build


def _copy(value: Any) -> Any:
    return value if value is None or value is UNSET else list(value)


def _same(value: Any) -> Any:
    return value
