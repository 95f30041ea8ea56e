"""What a snapshot subscription's revisions cover: the fields that move with them, and the rest.

The fan-out (:mod:`turnqueue.api.fanout`) sends a member that joins a group late the group's
newest payload. That replay is the current state only if every value the operation selects
changes with a revision the stream watches (``currentTurn { output }`` grows with none, R1).

Each stream therefore declares, beside itself (``resolvers/subscriptions.py``), a
:class:`Snapshot`: the bus events it watches and, for every object type its payload can reach,
which fields *move* with those revisions and which stay *still*. The fan-out groups an operation
only when it selects moving fields alone (:func:`groupable`). A field declared neither way counts
as still, and ``tests/api/test_api_fanout_declarations.py`` fails until it is declared.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from graphql import (
    DocumentNode,
    FieldNode,
    FragmentDefinitionNode,
    FragmentSpreadNode,
    InlineFragmentNode,
    OperationDefinitionNode,
    OperationType,
    SelectionSetNode,
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
    operations = [d for d in document.definitions if isinstance(d, OperationDefinitionNode)]
    if len(operations) != 1 or operations[0].operation is not OperationType.SUBSCRIPTION:
        return False
    operation = operations[0]
    name = operation.name.value if operation.name else None
    if operation_name is not None and operation_name != name:
        return False  # Strawberry closes the socket for it (4400)
    roots = operation.selection_set.selections
    if len(roots) != 1 or not isinstance(roots[0], FieldNode):
        return False
    root = roots[0]
    snapshot = snapshots.get(root.name.value)
    if snapshot is None:
        return False
    fragments = {
        d.name.value: d for d in document.definitions if isinstance(d, FragmentDefinitionNode)
    }
    return _selects_only(root.selection_set, snapshot.payload, fragments, set())


def _selects_only(
    selection_set: SelectionSetNode | None,
    allowed: Fields,
    fragments: Mapping[str, FragmentDefinitionNode],
    entered: set[str],
) -> bool:
    """Whether ``selection_set`` (through its fragments) selects only moving fields."""
    if selection_set is None:
        return True
    for selection in selection_set.selections:
        if isinstance(selection, FieldNode):
            name = selection.name.value
            if name == "__typename":
                continue
            if name not in allowed.moving:
                return False
            below = allowed.moving[name]
            if below is not None and not _selects_only(
                selection.selection_set, below, fragments, entered
            ):
                return False
        elif isinstance(selection, InlineFragmentNode):
            if not _selects_only(selection.selection_set, allowed, fragments, entered):
                return False
        elif isinstance(selection, FragmentSpreadNode):
            name = selection.name.value
            fragment = fragments.get(name)
            if fragment is None or name in entered:  # unknown or cyclic: not ours to judge
                return False
            if not _selects_only(fragment.selection_set, allowed, fragments, entered | {name}):
                return False
        else:
            return False
    return True
