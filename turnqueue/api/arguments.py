"""A root field's arguments converted and its resolver called as Strawberry calls it, with the
per-type work done once (bench P4).

Strawberry's ``convert_arguments`` works out each input field's GraphQL name, type and generics
on every call. A :class:`Call` works them out once per field and then does per call only what
varies: ``cls(**kwargs)`` per input object, a copy per list, the value itself for a leaf (scalars
and enums, which graphql-core has already coerced).

Compiled: optional and list types, leaves, input types without a ``from_input`` of their own,
lazy types. ``Maybe``, ``GlobalID`` and input types that build themselves are not: such a field
takes Strawberry's own call (:func:`compile_call` answers None). The resolver is then called as
Strawberry's ``get_arguments`` passes them (``self``/``root``/``parent`` as the source, ``info``
as a Strawberry ``Info``); a field with extensions, or a schema with exception handlers, is not
compiled. ``tests/api/test_api_arguments.py`` compares the conversion with Strawberry's for
every mutation's input.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import MISSING
from typing import Any

from graphql import GraphQLResolveInfo
from strawberry import UNSET, Schema
from strawberry.relay import GlobalID
from strawberry.scalars import is_scalar
from strawberry.schema.name_converter import NameConverter
from strawberry.types import has_object_definition

from turnqueue.graphql_internals import (
    LazyType,
    ScalarDefinition,
    ScalarWrapper,
    StrawberryEnumDefinition,
    StrawberryField,
    StrawberryList,
    StrawberryMaybe,
    StrawberryOptional,
    StrawberryType,
    has_enum_definition,
)

Convert = Callable[[Any], Any]
Registry = Mapping[object, ScalarWrapper | ScalarDefinition]


class Call:
    """One field's resolver with its arguments converted (see the module's docstring)."""

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
    def __init__(self, registry: Registry, names: NameConverter) -> None:
        self._registry = registry
        self._names = names

    def converter(self, type_: StrawberryType | type) -> Convert | None:
        """``convert_argument`` for values of ``type_``, worked out once."""
        if isinstance(type_, StrawberryMaybe) or type_ is GlobalID:
            return None
        if isinstance(type_, LazyType):
            return self.converter(type_.resolve_type())
        if isinstance(type_, StrawberryOptional):
            return self.converter(type_.of_type)  # None passes through every converter
        if isinstance(type_, StrawberryList):
            of = type_.of_type
            if self._leaf(of) or (isinstance(of, StrawberryOptional) and self._leaf(of.of_type)):
                # Copied as Strawberry does: graphql-core shares a default list between requests.
                return _copy
            item = self.converter(of)
            if item is None:
                return None
            return lambda value: (
                value if value is None or value is UNSET else [item(v) for v in value]
            )
        if self._leaf(type_) or has_enum_definition(type_):
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

    def _leaf(self, type_: StrawberryType | type) -> bool:
        if isinstance(type_, LazyType):
            return self._leaf(type_.resolve_type())
        return is_scalar(type_, self._registry) or isinstance(type_, StrawberryEnumDefinition)


def _copy(value: Any) -> Any:
    return value if value is None or value is UNSET else list(value)


def _same(value: Any) -> Any:
    return value
