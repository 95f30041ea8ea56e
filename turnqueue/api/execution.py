"""The graphql-core executor turnqueue runs operations on: Strawberry's, with a fresh
sub-field memo for every subscription event (bench P7), and graphql-core's gather of sibling
fields made to cancel no field before it has started.

Hazard (graphql-core 3.3, Strawberry 0.341; pyproject.toml's ranges end before the next minor
release of each, and scripts/newest_graphql.py tests the newest they allow): every event of a
subscription is executed by ``Executor.build_per_event_executor``, a *shallow* ``copy`` of the
subscription's executor, so the copies share ``_relevant_sub_fields``, the memo of
``Executor.collect_subfields``, keyed by ``(return_type, id(field_details_list))``. The root
field's ``field_details_list`` is built anew for every event, so each event adds a key per
object-typed field it completes, kept (with its lists and sub-fields) until the subscription
ends: +3 KiB per event. The keys are never equal across events, so a memo per event loses no
hit. ``_stream_usages`` (the other identity-keyed map) is never filled for a subscription; the
rest of the shared state (the sets of pending and background futures) is shared on purpose.
See docs/upstream/ for the reproduction and the patch proposed to graphql-core.

Hazard (graphql-core 3.3.2 on Python 3.11): a resolver's coroutine is created when its field is
executed and handed, unstarted, to the coroutine that completes the field
(``complete_awaitable_value(…, result)``, and likewise for list items and sub-selections), which
``gather_with_cancel`` runs as a task beside its siblings. When a field's error reaches an
ancestor (a non-null field failing), the ancestor's ``gather_with_cancel`` cancels its pending
children, and cancelling a child that is itself waiting in ``asyncio.gather`` cancels *its*
children at once — tasks created in the step just before, which have not run yet. A task
cancelled before its first step never runs its coroutine, so the unstarted coroutines it was
handed each warn ``coroutine '…_async_resolver' was never awaited`` when collected.
:func:`gather_started_then_cancel` replaces graphql-core's ``gather_with_cancel`` in its executor
(:func:`install`): it awaits the gather through ``asyncio.shield``, so an ancestor's cancellation
reaches the children only through its own handler, which runs after every child has taken its
first step: each cancelled field runs up to its first ``await`` and is cancelled there. The
first error still propagates, after the pending children are cancelled and settled (now also
when the gathering task is itself cancelled). See
docs/upstream/graphql-core-cancel-before-start.md for the reproduction.
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
