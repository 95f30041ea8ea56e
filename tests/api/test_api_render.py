"""``turnqueue.api.render``: a compiled selection renders exactly what graphql-core's execution of
it returns, for random selections (aliases, repeated keys, fragments, ``@skip``/``@include``,
``__typename``) of every snapshot payload, on random values (P8: the fan-out sends rendered
payloads instead of executed ones; the frames must not change).

The reference is the executor itself: a schema of the same Strawberry types with a query root
that returns the value, executed by graphql-core through Strawberry.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import strawberry
from graphql import OperationType, parse
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strawberry.schema.config import StrawberryConfig

from turnqueue import domain
from turnqueue.api import build_schema
from turnqueue.api.render import Root, Unrenderable, compile_root
from turnqueue.schema.queue import CancellationStatus, QueueStatus
from turnqueue.schema.scalars import SCALAR_MAP
from turnqueue.schema.sessions import Session
from turnqueue.settings import Settings

SCHEMA = build_schema(Settings())._schema
#: the basic (resolver-free) fields of each payload type, with the object fields below them
FIELDS: dict[str, dict[str, str | None]] = {
    "QueueStatus": {
        **dict.fromkeys(
            ("id", "sessionId", "autoRun", "pauseReason", "heldBy", "count", "max", "revision")
        ),
        "entries": "QueueEntry",
    },
    "QueueEntry": dict.fromkeys(("id", "sessionId", "position", "content", "source", "queuedAt")),
    "CancellationStatus": dict.fromkeys(("id", "sessionId", "pending", "revision")),
    "Session": dict.fromkeys(
        ("id", "taskId", "agent", "state", "revision", "promptable", "createdAt", "updatedAt")
    ),
}
ROOTS = {
    "queueStatusChanged": "QueueStatus",
    "cancellationChanged": "CancellationStatus",
    "sessionChanged": "Session",
}


@strawberry.type
class Query:
    """The reference: each root returns the value under test, executed by graphql-core."""

    queue: QueueStatus | None = None
    cancellation: CancellationStatus | None = None
    session: Session | None = None


REFERENCE = strawberry.Schema(query=Query, config=StrawberryConfig(scalar_map=SCALAR_MAP))
REFERENCE_ROOT = {
    "QueueStatus": "queue",
    "CancellationStatus": "cancellation",
    "Session": "session",
}


# -- random selections ---------------------------------------------------------------------------
@st.composite
def selection(draw: st.DrawFn, type_name: str, fragments: list[str], depth: int = 0) -> str:
    """A selection set of ``type_name`` in GraphQL text, with the features the renderer does;
    the named fragments it spreads are added to ``fragments``."""
    names = sorted(FIELDS[type_name])
    chosen = draw(st.lists(st.sampled_from([*names, "__typename"]), min_size=1, max_size=6))
    parts = []
    for i, name in enumerate(chosen):
        below = FIELDS[type_name].get(name)
        field = name
        if draw(st.booleans()):
            field = f"a{depth}_{i % 2}_{name}: {name}"  # aliases; the same one twice may merge
        wrap = draw(st.sampled_from(["", "skip", "include", "inline", "typed", "named"]))
        if wrap == "skip":
            field += f" @skip(if: {draw(st.sampled_from(['true', 'false']))})"
        elif wrap == "include":
            field += f" @include(if: {draw(st.sampled_from(['true', 'false']))})"
        if below is not None:
            field += " { " + draw(selection(below, fragments, depth + 1)) + " }"
        if wrap == "inline":
            field = "... { " + field + " }"
        elif wrap == "typed":
            field = f"... on {type_name} {{ {field} }}"
        elif wrap == "named":  # spread twice: collected once
            name = f"F{len(fragments)}"
            fragments.append(f"fragment {name} on {type_name} {{ {field} }}")
            field = f"...{name} ...{name}"
        parts.append(field)
    return " ".join(parts)


def _queue(draw: st.DrawFn) -> QueueStatus:
    sid = draw(st.uuids()).hex
    at = datetime(2026, 1, 1, tzinfo=UTC) + timedelta(seconds=draw(st.integers(0, 10**8)))
    entries = tuple(
        domain.QueueEntry(
            id=str(draw(st.uuids())),
            session_id=sid,
            position=i + 1,
            content=draw(st.text(min_size=1, max_size=20)),
            source=draw(st.sampled_from(list(domain.MessageSource))),
            queued_at=at,
        )
        for i in range(draw(st.integers(0, 4)))
    )
    return QueueStatus.from_domain(
        domain.QueueStatus(
            session_id=sid,
            auto_run=draw(st.booleans()),
            pause_reason=draw(st.none() | st.sampled_from(list(domain.PauseReason))),
            held_by=tuple(draw(st.lists(st.sampled_from(list(domain.HoldReason)), unique=True))),
            entries=entries,
            max=draw(st.none() | st.integers(0, 1000)),
            revision=draw(st.integers(0, 2**53 - 1)),
        )
    )


@st.composite
def value(draw: st.DrawFn, type_name: str) -> Any:
    if type_name == "QueueStatus":
        return _queue(draw)
    if type_name == "CancellationStatus":
        status = domain.CancellationStatus(
            str(draw(st.uuids())), draw(st.booleans()), draw(st.integers(0, 2**53 - 1))
        )
        return CancellationStatus.from_domain(status)
    stamp = datetime(2026, 1, 1, tzinfo=UTC) + timedelta(microseconds=draw(st.integers(0, 10**12)))
    return Session.from_domain(
        domain.Session(
            id=str(draw(st.uuids())),
            task_id=str(draw(st.uuids())),
            owner="alice",
            state=draw(st.sampled_from(list(domain.SessionState))),
            agent=draw(st.sampled_from(["scripted", "command"])),
            created_at=stamp,
            updated_at=stamp + timedelta(seconds=1),
            revision=draw(st.integers(0, 2**53 - 1)),
        )
    )


def compile(
    document: Any, variables: dict[str, Any] | None, name: str | None = None
) -> tuple[Root, dict[str, Any]] | None:
    """The compiled root and the root field's arguments ``variables`` give it."""
    root = compile_root(SCHEMA, document, name, OperationType.SUBSCRIPTION)
    bound = None if root is None else root.arguments(SCHEMA, variables)
    return None if root is None or bound is None else (root, bound[1])


def executed(type_name: str, selected: str, fragments: str, obj: Any) -> Any:
    root = REFERENCE_ROOT[type_name]
    query = f"query {{ {root} {{ {selected} }} }}{fragments}"
    result = REFERENCE.execute_sync(query, root_value=Query(**{root: obj}))
    assert result.errors is None, result.errors
    assert result.data is not None
    return result.data[root]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_p8_a_rendered_payload_is_what_the_executor_returns(data: st.DataObject) -> None:
    """P8, R3: rendered == executed, for random selections of every snapshot payload."""
    root = data.draw(st.sampled_from(sorted(ROOTS)))
    type_name = ROOTS[root]
    named: list[str] = []
    selected = data.draw(selection(type_name, named))
    fragments = " " + " ".join(named)
    document = parse(
        f"subscription S($s: ID!) {{ out: {root}(sessionId: $s) {{ {selected} }} }}" + fragments
    )
    compiled = compile(document, {"s": "sid"}, "S")
    assert compiled is not None, selected
    assert compiled[0].name == root and compiled[1] == {"sessionId": "sid"}
    obj = data.draw(value(type_name))
    rendered = json.loads(compiled[0].payload(obj))
    expected = executed(type_name, selected, fragments, obj)
    assert rendered == {"data": {"out": expected}}


@pytest.mark.parametrize(
    "document",
    [
        # a field with a resolver: only the executor runs it
        "subscription($s: ID!) { sessionChanged(sessionId: $s) { cancellationPending } }",
        "subscription($s: ID!) { sessionChanged(sessionId: $s) { currentTurn { id } } }",
        # a condition on a variable (compiled once for any variables), a directive it does
        # not know
        "subscription($s: ID!, $v: Boolean!) { queueStatusChanged(sessionId: $s) {"
        " revision @skip(if: $v) } }",
        "subscription($s: ID!) { queueStatusChanged(sessionId: $s) @defer { revision } }",
        # two root fields, a query, a fragment on another type
        "subscription($s: ID!) { a: queueStatusChanged(sessionId: $s) { revision } "
        "b: queueStatusChanged(sessionId: $s) { count } }",
        "query { __typename }",
        "subscription($s: ID!) { queueStatusChanged(sessionId: $s) { ... on Session { id } } }",
    ],
)
def test_p8_what_the_renderer_does_not_do_takes_the_executor(document: str) -> None:
    """P8: anything outside the renderer's subset is not compiled (the fan-out executes it)."""
    assert compile(parse(document), {"s": "x"}) is None


def test_p8_variables_that_do_not_coerce_and_another_operation_name_are_not_compiled() -> None:
    document = parse("subscription S($s: ID!) { queueStatusChanged(sessionId: $s) { revision } }")
    assert compile(document, {"s": {"not": "an id"}}) is None
    assert compile(document, {}) is None  # a required variable missing
    assert compile(document, {"s": "x"}, "Other") is None
    compiled = compile(document, {"s": 7}, "S")  # an Int is a valid ID
    assert compiled is not None and compiled[1] == {"sessionId": "7"}


def test_p8_a_null_where_the_type_forbids_it_is_a_fault_not_a_payload() -> None:
    """The module's hazard: the executor would answer an error; the renderer raises."""
    document = parse('subscription { cancellationChanged(sessionId: "x") { pending } }')
    compiled = compile(document, None)
    assert compiled is not None
    broken = CancellationStatus.from_domain(domain.CancellationStatus("x", True, 1))
    broken.pending = None  # type: ignore[assignment]
    with pytest.raises(Unrenderable):
        compiled[0].payload(broken)
