"""G1: every type, field, argument, input field and enum value of the schema has a description.

The walk runs over the served schema (graphql-core's ``GraphQLSchema`` built from turnqueue's
resolver roots), so a field added without a description fails here, named.
"""

from __future__ import annotations

from collections.abc import Callable

from graphql import (
    GraphQLEnumType,
    GraphQLInputObjectType,
    GraphQLInterfaceType,
    GraphQLNamedType,
    GraphQLObjectType,
    GraphQLSchema,
    build_schema,
)

from turnqueue.api import build_schema as build_api_schema
from turnqueue.settings import Settings


def undocumented(schema: GraphQLSchema) -> list[str]:
    """Each schema element without a description (blank counts as none), as a readable path."""
    missing: list[str] = []

    def check(path: str, description: str | None) -> None:
        if not (description or "").strip():
            missing.append(path)

    for name, named in sorted(schema.type_map.items()):
        if name.startswith("__"):  # introspection types: graphql-core's own
            continue
        _walk(named, check)
    for directive in schema.directives:
        check(f"@{directive.name}", directive.description)
        for arg_name, arg in directive.args.items():
            check(f"@{directive.name}({arg_name}:)", arg.description)
    return missing


def _walk(named: GraphQLNamedType, check: Callable[[str, str | None], None]) -> None:
    check(named.name, named.description)
    if isinstance(named, (GraphQLObjectType, GraphQLInterfaceType)):
        for field_name, field in named.fields.items():
            check(f"{named.name}.{field_name}", field.description)
            for arg_name, arg in field.args.items():
                check(f"{named.name}.{field_name}({arg_name}:)", arg.description)
    elif isinstance(named, GraphQLInputObjectType):
        for field_name, input_field in named.fields.items():
            check(f"{named.name}.{field_name}", input_field.description)
    elif isinstance(named, GraphQLEnumType):
        for value_name, value in named.values.items():
            check(f"{named.name}.{value_name}", value.description)


def test_g1_every_schema_element_has_a_description() -> None:
    schema = build_api_schema(Settings())._schema
    missing = undocumented(schema)
    assert missing == [], "undocumented schema elements:\n  " + "\n  ".join(missing)


def test_g1_the_walk_finds_what_is_missing() -> None:
    """Guards the guard: every kind of element without a description is reported."""
    sdl = '''
    """Documented."""
    type Query { a(x: Int): Int  """ok""" b: E }
    enum E { ONE """ok""" TWO }
    input I { f: Int }
    '''
    found = set(undocumented(build_schema(sdl)))
    assert {"Query.a", "Query.a(x:)", "E", "E.ONE", "I", "I.f"} <= found
    assert not {"Query", "Query.b", "E.TWO", "Int", "String"} & found
