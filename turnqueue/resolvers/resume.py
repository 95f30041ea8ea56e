"""Where a resumable stream starts (O2, O3): its arguments, or a reconnect's ``Last-Event-ID``.

Every event of ``turnOutput`` and ``turnItems`` has an SSE ``id`` naming the *place* right after
it: ``<turnId>:<end>``, or ``<turnId>:<end>:done`` for the turn's last message (``end`` in the
stream's own unit: characters, or log entries). A reconnect resumes right after it: the rest of
that turn and, following the session (no ``turnId``), every later turn. ``done`` is part of the
place, so a client that had a turn's end is not sent it again.

The snapshot streams' ids are their revisions (``<revision>``; sessionChanged
``<revision>:<cancellationRevision>``): a reconnect is sent only newer states.
"""

from __future__ import annotations

from dataclasses import dataclass

from starlette.requests import Request

from turnqueue.resolvers.context import Context
from turnqueue.schema.connections import invalid

DONE = "done"


@dataclass(frozen=True, slots=True)
class Place:
    """A stream's place in a turn: what it has sent of it (``end``), and whether its end."""

    turn_id: str
    end: int
    done: bool = False


@dataclass(frozen=True, slots=True)
class Start:
    """Where a resumable stream starts: in ``turn_id`` (None: the session's current turn) after
    ``after``, or after the place a reconnect names (``resumed``); ``follow``: the stream goes on
    with the session's later turns (no ``turnId``)."""

    turn_id: str | None
    after: int
    follow: bool
    resumed: Place | None = None


def event_id(turn_id: str, end: int, done: bool) -> str:
    """O3: the SSE ``id`` of a turnOutput or turnItems event: the place right after it."""
    return f"{turn_id}:{end}:{DONE}" if done else f"{turn_id}:{end}"


def last_event_id(ctx: Context) -> str | None:
    """A reconnect's ``Last-Event-ID`` header (SSE, O3); None on WebSocket or without one."""
    request = ctx.request
    header = request.headers.get("last-event-id") if isinstance(request, Request) else None
    return header.strip() if header else None


def parse_place(header: str) -> Place:
    """The place a turnOutput or turnItems event id names; INVALID_INPUT otherwise."""
    match header.split(":"):
        case [turn_id, end, *done] if turn_id and end.isdigit() and done in ([], [DONE]):
            return Place(turn_id, int(end), bool(done))
    raise invalid("Last-Event-ID is not a turnOutput or turnItems event id")


def start_of(ctx: Context, turn_id: str | None, after_offset: int | None) -> Start:
    """Where turnOutput or turnItems starts: the arguments, and a reconnect's place over them.
    A place in another turn than ``turnId`` names is refused (INVALID_INPUT): it is not an id of
    this stream."""
    follow = turn_id is None
    header = last_event_id(ctx)
    if header is None:
        return Start(turn_id, after_offset or 0, follow)
    place = parse_place(header)
    if turn_id is not None and place.turn_id != turn_id:
        raise invalid("Last-Event-ID names another turn than turnId")
    return Start(place.turn_id, place.end, follow, resumed=place)


def last_revisions(ctx: Context, parts: int) -> tuple[int, ...] | None:
    """The revisions a snapshot stream's reconnect had (its ``Last-Event-ID``: ``parts``
    revisions joined by ``:``); None without one; INVALID_INPUT if it is no such id."""
    header = last_event_id(ctx)
    if header is None:
        return None
    values = header.split(":")
    if len(values) != parts or not all(v.isdigit() for v in values):
        raise invalid("Last-Event-ID is not an event id of this subscription")
    return tuple(int(v) for v in values)
