"""R3 and the fan-out: every field a snapshot subscription can select is declared, beside its
stream, as moving with the revisions the stream watches or as still (``resolvers.revisions``).

A payload type that gains a field fails here until the field is declared one way or the other:
a field that changes without the stream's revision must never be shared by a group and replayed
to a late joiner as if it were current.
"""

from __future__ import annotations

from graphql import (
    GraphQLObjectType,
    GraphQLSchema,
    get_named_type,
    is_leaf_type,
    parse,
)

from turnqueue.api import build_schema
from turnqueue.resolvers.revisions import Fields, groupable
from turnqueue.resolvers.subscriptions import SNAPSHOTS
from turnqueue.settings import Settings


def undeclared(schema: GraphQLSchema) -> list[str]:
    """Every way the declarations and the schema disagree, as ``root.path: problem``."""
    problems: list[str] = []

    def walk(path: str, type_: GraphQLObjectType, declared: Fields) -> None:
        names = set(type_.fields)
        both = set(declared.moving) & declared.still
        problems.extend(f"{path}.{n}: both moving and still" for n in sorted(both))
        known = set(declared.moving) | declared.still
        problems.extend(f"{path}.{n}: not declared" for n in sorted(names - known))
        problems.extend(f"{path}.{n}: not in the schema" for n in sorted(known - names))
        for name, below in declared.moving.items():
            if name not in names:
                continue
            inner = get_named_type(type_.fields[name].type)
            if below is None and not is_leaf_type(inner):
                problems.append(f"{path}.{name}: a {inner} declared as a leaf")
            elif below is not None and not isinstance(inner, GraphQLObjectType):
                problems.append(f"{path}.{name}: a {inner} declared with fields")
            elif below is not None and isinstance(inner, GraphQLObjectType):
                walk(f"{path}.{name}", inner, below)

    subscription = schema.subscription_type
    assert subscription is not None
    for root, snapshot in SNAPSHOTS.items():
        assert snapshot.root == root
        field = subscription.fields.get(root)
        if field is None:
            problems.append(f"{root}: not a subscription")
            continue
        payload = get_named_type(field.type)
        assert isinstance(payload, GraphQLObjectType)
        walk(root, payload, snapshot.payload)
    return problems


def test_r3_every_field_of_a_snapshot_payload_is_declared_moving_or_still() -> None:
    assert undeclared(build_schema(Settings())._schema) == []


def test_r3_a_field_declared_nowhere_is_caught_and_never_grouped() -> None:
    """The check fails for a payload field left out of a declaration, and the fan-out treats
    such a field as still (an undeclared ``Turn`` field is not shared)."""
    schema = build_schema(Settings())._schema
    turn = schema.type_map["Turn"]
    assert isinstance(turn, GraphQLObjectType)
    turn.fields["futureField"] = turn.fields["status"]
    try:
        assert "sessionChanged.currentTurn.futureField: not declared" in undeclared(schema)
    finally:
        del turn.fields["futureField"]
    query = "subscription($s: ID!) { sessionChanged(sessionId: $s) { currentTurn { %s } } }"
    assert groupable(parse(query % "status __typename"), None, SNAPSHOTS)
    assert not groupable(parse(query % "status futureField"), None, SNAPSHOTS)
    assert not groupable(parse(query % "output"), None, SNAPSHOTS)
