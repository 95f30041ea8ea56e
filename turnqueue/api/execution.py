"""The graphql-core executor turnqueue runs operations on: Strawberry's, with a fresh
sub-field memo for every subscription event (bench P7).

Hazard (graphql-core 3.3, Strawberry 0.341; pyproject.toml's ranges end before the next minor
release of each, and scripts/newest_graphql.py tests the newest they allow): every event of a
subscription is executed by ``Executor.build_per_event_executor``, a *shallow* ``copy`` of the
subscription's executor. The copies therefore share one dict, ``_relevant_sub_fields``, the memo
of ``Executor.collect_subfields``, keyed by ``(return_type, id(field_details_list))``. The root
field's ``field_details_list`` is built anew for every event (``execute_operation`` collects the
root fields again), so each event adds a key per object-typed field it completes, and each entry
keeps its lists and collected sub-fields alive: +3 KiB per event on a standing subscription,
freed only when the subscription ends (and RSS stays). See docs/upstream/ for the reproduction
and the patch proposed to graphql-core.

The memo exists so that the items of one list share one collection of their sub-fields; its keys
are never equal across events, so a memo per event loses no hit. ``_stream_usages`` (the other
identity-keyed map) is never filled for a subscription (graphql-core rejects ``@stream`` there).
The rest of the shared state (the sets of pending and background futures) is shared on purpose.
"""

from __future__ import annotations

from typing import Any

from graphql.execution import Executor

from turnqueue.graphql_internals import StrawberryGraphQLCoreExecutionContext


class TurnqueueExecutionContext(StrawberryGraphQLCoreExecutionContext):
    """Passed to the schema as ``execution_context_class`` (Strawberry hands it to
    graphql-core's ``execute`` and ``subscribe`` as ``executor_class``)."""

    def build_per_event_executor(self, payload: Any) -> Executor[Any]:
        executor = super().build_per_event_executor(payload)
        # A memo of the event's own: it dies with the event (see the module docstring).
        executor._relevant_sub_fields = {}
        return executor
