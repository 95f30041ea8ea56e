"""Relay-style connections (G3): ``edges { cursor node }`` and ``pageInfo``, generic over the node.

Strawberry names each use after its node (``Connection[Task]`` is ``TaskConnection``, its edges
``TaskEdge``). These are not ``strawberry.relay`` types on purpose: relay's ``Connection`` needs
``Node`` types with global ids (which would change what every existing ``id`` means) and its
``ListConnection`` pages by offset (``arrayconnection:N`` cursors move when rows are inserted).
Here a cursor encodes the item's own immutable sort key, so it keeps its place under inserts;
the resolvers build them (``turnqueue.resolvers.connections``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

import strawberry
from graphql import GraphQLError

from turnqueue import domain
from turnqueue.errors import ErrorCode
from turnqueue.schema.fields import plain

N = TypeVar("N")

#: Descriptions of the four arguments every connection field takes.
FIRST = (
    "Page forwards: the first n items (after `after`, if given). At most 200 (a larger n answers "
    "200); not negative. Without `first` and `last`, the first 50."
)
AFTER = (
    "Only items after this cursor (the `cursor` of an edge, or `pageInfo.endCursor`, of this "
    "same connection). A cursor keeps its place however many items are added meanwhile."
)
LAST = (
    "Page backwards: the last n items (before `before`, if given). At most 200; not negative; "
    "not together with `first`."
)
BEFORE = "Only items before this cursor (an edge's `cursor` or `pageInfo.startCursor`)."


def invalid(message: str) -> GraphQLError:
    """A bad argument: a top-level error with ``extensions.code`` INVALID_INPUT."""
    return GraphQLError(message, extensions={"code": ErrorCode.INVALID_INPUT.value})


def page_count(name: str, count: int) -> int:
    """A count argument (``first``, ``last``) as a page answers it, at most ``domain.MAX_PAGE``
    (S3): a negative one is an INVALID_INPUT error, for the connections and the deprecated
    lists alike."""
    if count < 0:
        raise invalid(f"{name} must not be negative, not {count}")
    return domain.clamp_page(count)


@dataclass(frozen=True, slots=True)
class PageArgs:
    """The connection arguments as the client sent them (checked by the resolvers)."""

    first: int | None = None
    after: str | None = None
    last: int | None = None
    before: str | None = None


@strawberry.type(description="Where a page sits in its list, and the cursors to page on from it.")
class PageInfo:
    has_next_page: bool = plain(
        "Items follow this page: paging with `first`, whether more came after it; paging with "
        "`last` and `before`, whether items exist from `before` on."
    )
    has_previous_page: bool = plain(
        "Items precede this page: paging with `last`, whether more came before it; paging with "
        "`first` and `after`, whether items exist up to `after`."
    )
    start_cursor: str | None = plain(
        "The cursor of the first edge (pass it as `before` for the previous page); null when the "
        "page is empty."
    )
    end_cursor: str | None = plain(
        "The cursor of the last edge (pass it as `after` for the next page); null when the page is "
        "empty."
    )


@strawberry.type(description="One item of a page and its cursor.")
class Edge(Generic[N]):
    cursor: str = plain(
        "An opaque cursor for this item: pass it as `after` or `before` to the same connection. It "
        "encodes the item's position in the list's order, never an offset."
    )
    node: N = plain("The item.")


@strawberry.type(
    description=(
        "One page of a list (Relay cursor connection). The field that answers it says the "
        "list's order; cursors of one connection are not valid for another."
    )
)
class Connection(Generic[N]):
    edges: list[Edge[N]] = plain("The page's items with their cursors, in the list's order.")
    page_info: PageInfo = plain(
        "Whether items lie before and after this page, and its end cursors."
    )
