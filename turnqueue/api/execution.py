"""The graphql-core executor turnqueue runs operations on: Strawberry's, with a fresh sub-field
memo for every subscription event, and a gather of sibling fields that cancels no field before it
has started. (graphql-core 3.3, Strawberry 0.341: pyproject.toml's ranges end before their next
minor release; scripts/newest_graphql.py tests the newest they allow.)

Hazard (memo): every subscription event is executed by a *shallow* copy of the subscription's
executor (``build_per_event_executor``), so the copies share ``_relevant_sub_fields``, the memo
of ``collect_subfields``, keyed by ``(return_type, id(field_details_list))``. Those lists are new
for every event, so each event adds keys that are never hit again and are kept until the
subscription ends; a memo per event loses nothing. See docs/upstream/.

Hazard (cancelled before started, graphql-core 3.3.2 on Python 3.11): a resolver's coroutine is
handed unstarted to the task that completes its field. When an error reaches an ancestor, its
``gather_with_cancel`` cancels the pending children at once, including tasks that never ran, and
each unstarted coroutine then warns "never awaited". :func:`gather_started_then_cancel` awaits
the gather through ``asyncio.shield`` and cancels the children from its own handler, after every
child has taken its first step (docs/upstream/graphql-core-cancel-before-start.md).
"""

from __future__ import annotations

from asyncio import Future, ensure_future, gather, shield
from collections.abc import Awaitable
from typing import Any

from graphql.execution import Executor
from graphql.pyutils import gather_with_cancel

from turnqueue.graphql_internals import StrawberryGraphQLCoreExecutionContext, graphql_executor


class TurnqueueExecutionContext(StrawberryGraphQLCoreExecutionContext):
    """Passed to the schema as ``execution_context_class`` (Strawberry hands it to
    graphql-core's ``execute`` and ``subscribe`` as ``executor_class``)."""

    def build_per_event_executor(self, payload: Any) -> Executor[Any]:
        executor = super().build_per_event_executor(payload)
        # A memo of the event's own: it dies with the event (see the module docstring).
        executor._relevant_sub_fields = {}
        return executor


async def gather_started_then_cancel(*awaitables: Awaitable[Any]) -> list[Any]:
    """graphql-core's ``gather_with_cancel`` (the results in order; the first error propagates
    and the pending awaitables are cancelled and settled first), except that no awaitable is
    cancelled before its task has started (see the module's hazard)."""
    futures: list[Future[Any]] = [ensure_future(aw) for aw in awaitables]
    gathered = gather(*futures)
    # The shield reads its error, unless the shield was cancelled first: then nothing would
    # (asyncio would log "exception was never retrieved").
    gathered.add_done_callback(_retrieve)
    try:
        # Shielded: a cancellation of this task does not cancel the children from within
        # gather (before they may have run); the handler below does, after they have.
        return await shield(gathered)
    except BaseException:
        for future in futures:
            if not future.done():
                future.cancel()
        await gather(*futures, return_exceptions=True)
        raise


def _retrieve(future: Future[Any]) -> None:
    if not future.cancelled():
        future.exception()


def install() -> None:
    """Make graphql-core's executor gather with :func:`gather_started_then_cancel`. Called by
    the schema's assembly (``build_schema``), not at import; idempotent. A graphql-core whose
    executor no longer binds its own ``gather_with_cancel`` is left as it is, and
    tests/api/test_api_execution.py fails. Hazard: the executor module is global, so every
    graphql-core execution in the process gathers this way from then on."""
    namespace = vars(graphql_executor)  # the executor's globals, where its methods look it up
    if namespace.get("gather_with_cancel") is gather_with_cancel:
        namespace["gather_with_cancel"] = gather_started_then_cancel
