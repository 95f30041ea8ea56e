"""``turnqueue.api.plans``: a compiled call converts a resolver's arguments exactly as
Strawberry's ``convert_arguments`` does, for every mutation's input, on random values of every
shape the schema allows (fields given, omitted or null; enums; lists); and passes the resolver
what Strawberry's ``get_arguments`` passes (P4)."""

from __future__ import annotations

from typing import Any

import pytest
import strawberry
from graphql import (
    GraphQLEnumType,
    GraphQLInputObjectType,
    GraphQLInputType,
    GraphQLList,
    GraphQLNonNull,
    GraphQLScalarType,
)
from hypothesis import given, settings
from hypothesis import strategies as st
from strawberry.types.arguments import convert_arguments
from strawberry.types.field import StrawberryField

from turnqueue.api import build_schema
from turnqueue.api.plans import compile_call
from turnqueue.api.render import DEFINITION
from turnqueue.settings import Settings

SCHEMA = build_schema(Settings())
MUTATIONS = SCHEMA._schema.mutation_type
assert MUTATIONS is not None
SCALARS: dict[str, st.SearchStrategy[Any]] = {
    "ID": st.text(max_size=12),
    "String": st.text(max_size=12),
    "Int": st.integers(-(2**31), 2**31 - 1),
    "Float": st.floats(allow_nan=False),
    "Boolean": st.booleans(),
    "Revision": st.integers(0, 2**53 - 1),
}


def coerced(type_: GraphQLInputType) -> st.SearchStrategy[Any]:
    """A value of ``type_`` as graphql-core hands it to a resolver (already coerced)."""
    if isinstance(type_, GraphQLNonNull):
        return _non_null(type_.of_type)
    return st.none() | _non_null(type_)


def _non_null(type_: GraphQLInputType) -> st.SearchStrategy[Any]:
    if isinstance(type_, GraphQLList):
        return st.lists(coerced(type_.of_type), max_size=3)
    if isinstance(type_, GraphQLEnumType):
        return st.sampled_from([v.value for v in type_.values.values()])
    if isinstance(type_, GraphQLScalarType):
        return SCALARS[type_.name]
    assert isinstance(type_, GraphQLInputObjectType)
    required = {n: coerced(f.type) for n, f in type_.fields.items() if _required(f.type)}
    optional = {n: coerced(f.type) for n, f in type_.fields.items() if not _required(f.type)}
    return st.fixed_dictionaries(required, optional=optional)


def _required(type_: GraphQLInputType) -> bool:
    return isinstance(type_, GraphQLNonNull)


@pytest.mark.parametrize("name", sorted(MUTATIONS.fields))
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_p4_a_compiled_call_converts_arguments_as_strawberry_does(
    name: str, data: st.DataObject
) -> None:
    field = MUTATIONS.fields[name]
    definition: StrawberryField = field.extensions[DEFINITION]
    call = compile_call(SCHEMA, definition)
    assert call is not None, f"{name}: every mutation's input is compiled"
    values = {a: data.draw(coerced(arg.type)) for a, arg in field.args.items()}
    values = {a: v for a, v in values.items() if v is not None or _required(field.args[a].type)}
    expected = convert_arguments(
        values,
        definition.arguments,
        scalar_registry=SCHEMA.schema_converter.scalar_registry,
        config=SCHEMA.config,
    )
    assert call.convert(values) == expected


SEEN: dict[str, Any] = {}


@strawberry.input
class In:
    x: int
    y: str | None = None


@strawberry.type
class ProbeMutation:
    @strawberry.mutation
    def go(self, info: strawberry.Info, input: In) -> int:
        SEEN.update(self=self, context=info.context, input=input)
        return input.x


@strawberry.type
class ProbeQuery:
    ok: bool = True


def test_p4_a_compiled_call_passes_self_and_info_as_strawberry_does() -> None:
    """The resolver gets the source as ``self`` and a Strawberry ``Info`` wrapping graphql-core's
    (``info.context`` is what the resolvers read)."""
    schema = strawberry.Schema(query=ProbeQuery, mutation=ProbeMutation)
    mutation_type = schema._schema.mutation_type
    assert mutation_type is not None
    call = compile_call(schema, mutation_type.fields["go"].extensions[DEFINITION])
    assert call is not None

    class RawInfo:
        context = "the context"

    assert call("root", RawInfo(), {"input": {"x": 3}}) == 3  # type: ignore[arg-type]
    assert SEEN == {"self": "root", "context": "the context", "input": In(x=3, y=None)}
