"""The executor workaround itself (turnqueue/api/execution.py, issue 13, P7), on bare graphql-core.

A subscription over a small schema: each event's executor gets a memo of its own (the
subscription's stays empty), the memo still serves the items of a list within one event, and the
results are those of graphql-core's own executor. A canary shows the upstream growth is still
there: when it fails after an upgrade, graphql-core fixed it and the workaround can go.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from inspect import isawaitable
from typing import Any

from graphql import ExecutionResult, Executor, GraphQLSchema, build_schema, parse, subscribe
from strawberry.schema.schema import StrawberryGraphQLCoreExecutionContext

from turnqueue.api import build_schema as build_turnqueue_schema
from turnqueue.api.execution import TurnqueueExecutionContext
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
