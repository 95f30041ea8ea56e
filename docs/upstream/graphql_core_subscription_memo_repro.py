"""Minimal reproduction: graphql-core 3.3.2 keeps a memo entry per subscription event, forever.

Run:  python graphql_core_subscription_memo_repro.py [--fixed]

Each event of a subscription is executed by ``Executor.build_per_event_executor``, a *shallow*
copy of the subscription's executor, so every per-event executor shares the one dict
``Executor._relevant_sub_fields`` (the memo of ``Executor.collect_subfields``). The memo is keyed
by ``(return_type, id(field_details_list))``; the root field's ``field_details_list`` is rebuilt
for every event (``collect_fields`` runs again in ``execute_operation``), so every event adds new
keys — and each entry keeps its list (and the collected sub-fields) alive. Nothing evicts them
until the subscription ends. ``--fixed`` applies the proposed patch (a fresh memo per event)
as a subclass, to show the growth stops.
"""

from __future__ import annotations

import asyncio
import gc
import sys
import tracemalloc
from collections.abc import AsyncIterator, Awaitable
from typing import Any

import graphql
from graphql import Executor, build_schema, parse, subscribe

SDL = """
type Query { noop: String }
type Inner { a: Int b: Int }
type Status { id: ID! revision: Int! inner: Inner items: [Inner!]! }
type Subscription { statusChanged: Status! }
"""

DOCUMENT = parse("subscription { statusChanged { id revision inner { a b } items { a } } }")
EVENTS = 5_000


class Upstream(Executor[Any]):
    """graphql-core's own behaviour; only remembers the subscription's executor, to count."""

    subscription_executor: Executor[Any] | None = None

    def build_per_event_executor(self, payload: Any) -> Executor[Any]:
        Upstream.subscription_executor = self
        return super().build_per_event_executor(payload)


class FreshMemoPerEvent(Upstream):
    """The proposed fix, as a subclass: each event gets a memo of its own."""

    def build_per_event_executor(self, payload: Any) -> Executor[Any]:
        executor = super().build_per_event_executor(payload)
        executor._relevant_sub_fields = {}
        return executor


async def events(count: int) -> AsyncIterator[dict[str, Any]]:
    for revision in range(count):
        item = {"a": revision, "b": 0}
        yield {"statusChanged": {"id": "s", "revision": revision, "inner": item, "items": [item]}}


async def run(executor_class: type[Executor[Any]]) -> None:
    schema = build_schema(SDL)
    schema.subscription_type.fields["statusChanged"].subscribe = (  # type: ignore[union-attr]
        lambda _root, _info: events(EVENTS)
    )
    stream = subscribe(schema, DOCUMENT, executor_class=executor_class)
    if isinstance(stream, Awaitable):
        stream = await stream
    assert not isinstance(stream, graphql.ExecutionResult), stream
    memo_sizes: list[int] = []
    tracemalloc.start()
    marks: list[int] = []
    count = 0
    async for result in stream:
        assert result.errors is None, result.errors
        count += 1
        if count in (1_000, EVENTS):
            gc.collect()
            marks.append(tracemalloc.get_traced_memory()[0])
            assert Upstream.subscription_executor is not None
            memo_sizes.append(len(Upstream.subscription_executor._relevant_sub_fields))
    tracemalloc.stop()
    growth = (marks[1] - marks[0]) / (EVENTS - 1_000)
    print(
        f"graphql-core {graphql.__version__}, {executor_class.__name__}: "
        f"{growth:.0f} bytes/event retained between event 1,000 and {EVENTS:,}; "
        f"memo entries {memo_sizes[0]:,} -> {memo_sizes[1]:,}"
    )


if __name__ == "__main__":
    asyncio.run(run(FreshMemoPerEvent if "--fixed" in sys.argv else Upstream))
