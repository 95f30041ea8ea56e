"""The cluster's wire format: what instances send each other on the NOTIFY channel (M4).

A message is compact JSON: ``o``, its origin instance, always first (a receiver drops its own
messages by that prefix, ``origin_prefix``), then ``t``, its kind (``ev``, ``cmd``, ``re``), then
its fields. A notification never carries what can exceed PostgreSQL's 8,000-byte payload: every
message is ids, numbers and names, and output is a pointer, never its text — the turn and the
log's new end in characters (``OutputMark``), so a receiver's readers read the text from the
durable log (O1, ``engine/reads.py``); the items' new end likewise (``LogBatch`` without
records). :func:`message` refuses anything over the limit where a message is built.

An owner request's outcome (the ``outcome`` column of ``owner_requests``) is JSON too: the
handler's result, or its refusal as the owner raised it.
"""

from __future__ import annotations

import json
from typing import Any

from turnqueue.bus import Event, EventKind
from turnqueue.domain import CancellationStatus, LogBatch, OutputMark, OwnerRequest, TurnStatus
from turnqueue.errors import Conflict, ErrorCode
from turnqueue.store.notify import MAX_PAYLOAD_BYTES

#: Characters of an error message a reply carries at most (the rest is cut).
MAX_REASON = 500


class NotificationTooLarge(ValueError):
    """A message over NOTIFY's payload limit: refused where it is built, never sent."""


def message(origin: int, kind: str, fields: dict[str, Any]) -> str:
    """A message of ``origin`` as one NOTIFY payload: its origin first, then its kind;
    NotificationTooLarge over the limit (M4)."""
    text = json.dumps({"o": origin, "t": kind} | fields, separators=(",", ":"))  # ASCII
    if len(text) > MAX_PAYLOAD_BYTES:
        raise NotificationTooLarge(f"a {kind} notification of {len(text)} chars")
    return text


def origin_prefix(instance: int) -> str:
    """How every message :func:`message` builds for ``instance`` begins."""
    return f'{{"o":{instance},'


def runtime_fields(event: Event) -> dict[str, Any] | None:
    """A runtime event's ``ev`` fields: the output log's or the items' new end, a pointer, never
    the text (sent after its batch, or the end, committed, so what it points to is in the log
    before any receiver reads it, O1, O2). None: an event the store announces itself."""
    if event.kind is EventKind.OUTPUT and event.chunk is not None:
        o = event.chunk
        end = o.offset + len(o.text)
        fields: dict[str, Any] = {"k": "output", "s": o.session_id, "u": o.turn_id, "n": end}
        return fields | {"d": o.done, "st": o.status.value}
    if event.kind is EventKind.ITEMS and event.batch is not None:
        b = event.batch
        return {"k": "items", "s": b.session_id, "u": b.turn_id, "n": b.end}
    return None


def relayed_event(m: dict[str, Any]) -> Event:
    """An ``ev`` message of another instance as the event its receiver publishes (``relayed``)."""
    kind = EventKind(m["k"])
    sid = m["s"]
    if kind is EventKind.CANCELLATION:
        status = CancellationStatus(sid, bool(m["p"]), int(m["r"]))
        return Event(kind, sid, status.revision, cancellation=status, relayed=True)
    if kind is EventKind.OUTPUT:
        mark = OutputMark(sid, m["u"], int(m["n"]), bool(m["d"]), TurnStatus(m["st"]))
        return Event(kind, sid, mark=mark, relayed=True)
    if kind is EventKind.ITEMS:
        return Event(kind, sid, batch=LogBatch(sid, m["u"], int(m["n"])), relayed=True)
    return Event(kind, sid, int(m.get("r", 0)), relayed=True)


def refusal(code: ErrorCode, reason: str, field: list[str] | None = None) -> dict[str, Any]:
    """An owner's refusal as its request's outcome (``reason`` cut at ``MAX_REASON``)."""
    return {"code": code.value, "msg": reason[:MAX_REASON], "f": field}


def outcome(request: OwnerRequest) -> dict[str, Any]:
    """A DONE request's result, or its refusal raised as the owner raised it."""
    recorded: dict[str, Any] = json.loads(request.outcome or "{}")
    if "code" in recorded:
        raise Conflict(ErrorCode(recorded["code"]), recorded.get("msg", ""), recorded.get("f"))
    result: dict[str, Any] = recorded["r"]
    return result
