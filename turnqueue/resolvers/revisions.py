"""What a snapshot subscription's revisions cover: the fields that move with them, and the rest.

The fan-out (:mod:`turnqueue.api.fanout`) sends a member that joins a group late the group's
newest payload. That replay is the current state only if every value the operation selects
changes with a revision the stream watches (``currentTurn { output }`` grows with none, R1).

Each stream therefore declares, beside itself (``resolvers/subscriptions.py``), a
:class:`Snapshot`: the bus events it watches and, for every object type its payload can reach,
which fields *move* with those revisions and which stay *still*. The fan-out groups an operation
only when it selects moving fields alone (:func:`groupable`). A field declared neither way counts
as still, and ``tests/api/test_api_fanout_declarations.py`` fails until it is declared.

:func:`collect_fields` walks a selection as the executor collects it; the compiled renderer
(``api/render.py``) walks with it too.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from itertools import chain
from typing import Any

from graphql import (
    DocumentNode,
    FieldNode,
    FragmentDefinitionNode,
    FragmentSpreadNode,
    InlineFragmentNode,
    OperationType,
    SelectionNode,
    SelectionSetNode,
    get_operation_ast,
)

from turnqueue.bus import EventKind
from turnqueue.resolvers.context import Context
from turnqueue.resolvers.feeds import Feed


@dataclass(frozen=True, slots=True)
class Fields:
    """One object type's fields as a snapshot sees them (GraphQL names)."""

    #: field -> None for a leaf (scalar or enum), else the fields of the object type it returns
    moving: Mapping[str, Fields | None]
    #: fields whose value can change without a revision the stream watches
    still: frozenset[str]


def fields(*leaves: str, still: Iterable[str] = (), **objects: Fields) -> Fields:
    """``Fields``: moving leaves by name, moving object fields as keywords, then the still ones."""
    return Fields(moving={**dict.fromkeys(leaves), **objects}, still=frozenset(still))


#: Opens a stream for a session, authorised first (a refusal raises the NOT_FOUND GraphQLError, S2).
StreamOpener = Callable[[Context, str], Awaitable[AsyncIterator[object]]]


@dataclass(frozen=True, slots=True)
class Snapshot:
    """A snapshot subscription: its root field, the events whose revisions it compares, which
    fields of its payload move with them, how its stream opens (what its resolver returns, and
    what the fan-out renders itself) and, when its states are pushed, its feed (which the fan-out
    consumes without a task)."""

    root: str
    watches: tuple[EventKind, ...]
    payload: Fields
    open: StreamOpener
    feed: type[Feed[Any]] | None = None


def groupable(
    document: DocumentNode, operation_name: str | None, snapshots: Mapping[str, Snapshot]
) -> bool:
    """Whether ``document`` is one snapshot subscription selecting only moving fields."""
    operation = get_operation_ast(document, operation_name)
    if operation is None or operation.operation is not OperationType.SUBSCRIPTION:
        return False  # a name that matches none: Strawberry closes the socket for it (4400)
    roots = operation.selection_set.selections
    if len(roots) != 1 or not isinstance(roots[0], FieldNode):
        return False
    root = roots[0]
    snapshot = snapshots.get(root.name.value)
    if snapshot is None:
        return False
    selected = root.selection_set
    return selected is None or _selects_only([selected], snapshot.payload, fragments_of(document))


def _selects_only(
    selection_sets: list[SelectionSetNode],
    allowed: Fields,
    fragments: Mapping[str, FragmentDefinitionNode],
) -> bool:
    """Whether ``selection_sets`` (through their fragments) select only moving fields."""
    grouped = collect_fields(selection_sets, fragments)
    if grouped is None:
        return False  # an unknown fragment: not ours to judge
    for node in chain.from_iterable(grouped.values()):
        name = node.name.value
        if name == "__typename":
            continue
        if name not in allowed.moving:
            return False
        below = allowed.moving[name]
        if below is not None and node.selection_set is not None:
            if not _selects_only([node.selection_set], below, fragments):
                return False
    return True


#: Whether a selection's directives include it (False: skipped), or None: it is not collected.
Include = Callable[[SelectionNode], bool | None]


def fragments_of(document: DocumentNode) -> dict[str, FragmentDefinitionNode]:
    return {d.name.value: d for d in document.definitions if isinstance(d, FragmentDefinitionNode)}


def collect_fields(
    selection_sets: Iterable[SelectionSetNode],
    fragments: Mapping[str, FragmentDefinitionNode],
    on: str | None = None,
    include: Include = lambda _selection: True,
) -> dict[str, list[FieldNode]] | None:
    """The field nodes ``selection_sets`` select, by response key in the executor's order (first
    occurrence), through inline fragments and fragment spreads (a fragment is collected once, as
    the executor does). ``on``: the only type a fragment's condition may name (None: any type).
    None: a selection ``include`` refuses, an unknown fragment or a condition on another type."""
    grouped: dict[str, list[FieldNode]] = {}
    visited: set[str] = set()

    def visit(selection_set: SelectionSetNode) -> bool:
        for selection in selection_set.selections:
            included = include(selection)
            if not included:
                if included is None:
                    return False
                continue
            if isinstance(selection, FieldNode):
                key = selection.alias.value if selection.alias else selection.name.value
                grouped.setdefault(key, []).append(selection)
                continue
            fragment: InlineFragmentNode | FragmentDefinitionNode | None = None
            if isinstance(selection, FragmentSpreadNode):
                name = selection.name.value
                if name in visited:
                    continue
                visited.add(name)
                fragment = fragments.get(name)
            elif isinstance(selection, InlineFragmentNode):
                fragment = selection
            if fragment is None:
                return False
            condition = fragment.type_condition
            if on is not None and condition is not None and condition.name.value != on:
                return False
            if not visit(fragment.selection_set):
                return False
        return True

    return grouped if all(visit(s) for s in selection_sets) else None
