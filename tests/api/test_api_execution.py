"""The executor workaround itself (turnqueue/api/execution.py, issue 13, P7), on bare graphql-core.

A subscription over a small schema: each event's executor gets a memo of its own (the
subscription's stays empty), the memo still serves the items of a list within one event, and the
results are those of graphql-core's own executor. A canary shows the upstream growth is still
there: when it fails after an upgrade, graphql-core fixed it and the workaround can go.
"""

from __future__ import annotations

import asyncio
import gc
import warnings
from collections.abc import AsyncIterator
from inspect import isawaitable
from typing import Any, cast

import pytest
from graphql import (
    ExecutionResult,
    Executor,
    GraphQLObjectType,
    GraphQLSchema,
    build_schema,
    graphql,
    parse,
    subscribe,
)
from graphql.pyutils import gather_with_cancel
from strawberry.schema.schema import StrawberryGraphQLCoreExecutionContext

from turnqueue.api import build_schema as build_turnqueue_schema
from turnqueue.api.execution import TurnqueueExecutionContext, gather_started_then_cancel
from turnqueue.graphql_internals import graphql_executor
from turnqueue.settings import Settings

SDL = """
type Query { noop: String }
type Item { a: Int }
type Status { revision: Int! inner: Item items: [Item!]! }
type Subscription { statusChanged: Status! }
"""
DOCUMENT = parse("subscription { statusChanged { revision inner { a } items { a } } }")
EVENTS = 50
ITEMS = 5


def make_schema() -> GraphQLSchema:
    async def events(_root: object, _info: object) -> AsyncIterator[dict[str, Any]]:
        for revision in range(EVENTS):
            items = [{"a": i} for i in range(ITEMS)]
            yield {"statusChanged": {"revision": revision, "inner": {"a": 0}, "items": items}}

    schema = build_schema(SDL)
    assert schema.subscription_type is not None
    schema.subscription_type.fields["statusChanged"].subscribe = events
    return schema


class Recording:
    """Mixed into an executor class: remembers the subscription's executor and each event's."""

    subscription: Executor[Any] | None = None
    events: list[Executor[Any]]

    def build_per_event_executor(self, payload: Any) -> Executor[Any]:
        Recording.subscription = self  # type: ignore[assignment]
        executor: Executor[Any] = super().build_per_event_executor(payload)  # type: ignore[misc]
        Recording.events.append(executor)
        return executor


class RecordingTurnqueue(Recording, TurnqueueExecutionContext):
    pass


class RecordingUpstream(Recording, StrawberryGraphQLCoreExecutionContext):
    pass


async def run(executor_class: type[Executor[Any]]) -> list[dict[str, Any] | None]:
    Recording.subscription, Recording.events = None, []
    stream: Any = subscribe(make_schema(), DOCUMENT, executor_class=executor_class)
    if isawaitable(stream):
        stream = await stream
    assert isinstance(stream, AsyncIterator), stream
    results: list[dict[str, Any] | None] = []
    async for result in stream:
        assert isinstance(result, ExecutionResult) and result.errors is None, result
        results.append(result.data)
    return results


def test_p7_the_served_schema_uses_the_workaround() -> None:
    schema = build_turnqueue_schema(Settings())
    assert schema.execution_context_class is TurnqueueExecutionContext


async def test_p7_each_event_has_a_memo_of_its_own_and_results_are_unchanged() -> None:
    ours = await run(RecordingTurnqueue)
    subscription, events = Recording.subscription, Recording.events
    assert subscription is not None and len(events) == EVENTS
    assert subscription._relevant_sub_fields == {}  # nothing accumulates across events
    memos = {id(e._relevant_sub_fields) for e in events}
    assert len(memos) == EVENTS
    # Within an event the memo still works: one entry per object field (statusChanged, inner,
    # items), not one per list item.
    assert all(len(e._relevant_sub_fields) == 3 for e in events)
    assert ours == await run(RecordingUpstream)
    assert ours[-1] == {
        "statusChanged": {
            "revision": EVENTS - 1,
            "inner": {"a": 0},
            "items": [{"a": i} for i in range(ITEMS)],
        }
    }


async def test_p7_canary_graphql_core_still_shares_one_growing_memo() -> None:
    """When this fails after an upgrade, graphql-core no longer shares the memo across events:
    check docs/upstream/graphql-core-subscription-memo.md and drop turnqueue/api/execution.py."""
    await run(RecordingUpstream)
    subscription = Recording.subscription
    assert subscription is not None
    assert len(subscription._relevant_sub_fields) == 3 * EVENTS


# -- a field error that cancels a subtree whose tasks have not started (docs/upstream/
# graphql-core-cancel-before-start.md) ----------------------------------------------------------
TREE_SDL = """
type Query { node: Node }
type Node { value: Int node: Node plain: Node nodes: [Node] fails: Int! }
"""


def tree_schema() -> GraphQLSchema:
    async def node(_source: object, _info: object) -> dict[str, Any]:
        return {}

    async def value(_source: object, _info: object) -> int:
        return 1

    async def fails(_source: object, _info: object) -> int:
        raise ValueError("refused")

    schema = build_schema(TREE_SDL)
    assert schema.query_type is not None
    schema.query_type.fields["node"].resolve = node
    fields = cast("GraphQLObjectType", schema.get_type("Node")).fields
    fields["value"].resolve = value
    fields["node"].resolve = node
    fields["plain"].resolve = lambda _source, _info: {}  # sync: its sub-fields complete later
    fields["nodes"].resolve = lambda _source, _info: [{}, {}]
    fields["fails"].resolve = fails
    return schema


def tree(depth: int) -> str:
    """A selection whose async fields nest ``depth`` levels deep in objects and lists."""
    if depth == 0:
        return "value"
    below = tree(depth - 1)
    return f"value node {{ {below} }} plain {{ {below} }} nodes {{ {below} }}"


Answer = tuple[dict[str, Any] | None, list[list[str | int] | None]]

#: ``fails`` (non-null) nulls the top ``node``: its siblings' subtrees are cancelled mid-flight.
TREE_QUERIES = [f"{{ node {{ fails {tree(3)} }} }}", f"{{ node {{ {tree(3)} fails }} }}"]


def execute_counting_unawaited(query: str) -> tuple[Answer, list[str]]:
    """The answer to ``query`` on the tree schema (its data and its errors' paths) and the
    "never awaited" warnings it left. A coroutine dropped unawaited warns when it is collected,
    and the cancelled tasks' tracebacks keep it until their loop is gone: the query runs on a
    loop of its own, closed and let go before the count."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loop = asyncio.new_event_loop()
        try:
            result = loop.run_until_complete(graphql(tree_schema(), query))
        finally:
            loop.close()
        answer = (result.data, [e.path for e in result.errors or ()])
        del result, loop
        gc.collect()
    return answer, [str(w.message) for w in caught if "never awaited" in str(w.message)]


@pytest.mark.parametrize("query", TREE_QUERIES)
def test_s3_a_cancelled_subtree_leaves_no_coroutine_unawaited(query: str) -> None:
    """A non-null field's error nulls its object and cancels the fields still running beside
    it; no resolver's coroutine is left unawaited (the schema fuzz's RuntimeWarning on
    PostgreSQL), and the answer is graphql-core's."""
    build_turnqueue_schema(Settings())  # installs the workaround, as serving does
    assert vars(graphql_executor)["gather_with_cancel"] is gather_started_then_cancel
    answer, unawaited = execute_counting_unawaited(query)
    assert unawaited == []
    assert answer == ({"node": None}, [["node", "fails"]])


def test_s3_the_served_schema_gathers_with_the_workaround(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(graphql_executor, "gather_with_cancel", gather_with_cancel)
    build_turnqueue_schema(Settings())
    assert vars(graphql_executor)["gather_with_cancel"] is gather_started_then_cancel


def test_s3_canary_graphql_core_still_drops_coroutines_it_cancels_before_they_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """When this fails after an upgrade, graphql-core no longer cancels tasks before they
    start: check docs/upstream/graphql-core-cancel-before-start.md and drop
    ``gather_started_then_cancel`` from turnqueue/api/execution.py."""
    monkeypatch.setattr(graphql_executor, "gather_with_cancel", gather_with_cancel)
    for query in TREE_QUERIES:
        answer, unawaited = execute_counting_unawaited(query)
        assert answer == ({"node": None}, [["node", "fails"]])
        assert unawaited  # e.g. "coroutine 'tree_schema.<locals>.value' was never awaited"
