"""ACP ``session/update`` notifications as turn output (A3).

An update arrives as the JSON-RPC params of a ``session/update`` notification (camelCase, as on
the wire). :func:`to_output` turns it into the text of a message chunk (``str``) or a
:class:`TurnItem`; an update kind turnqueue does not know is kept whole as a RAW item, never
dropped. Working on the raw JSON rather than the package's pydantic models means an update the
installed schema cannot validate (a newer agent) still reaches the turn, as RAW.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from turnqueue.domain import ItemKind, TurnItem

#: The fields of a tool call item (A3); an update carries the subset that changed.
TOOL_FIELDS = ("title", "kind", "status", "content", "locations")


def _text_of(content: Any) -> str | None:
    """The text of a content block (``{"type": "text", "text": …}``); None for other blocks."""
    if isinstance(content, Mapping) and content.get("type") == "text":
        text = content.get("text")
        return text if isinstance(text, str) else None
    return None


def to_output(update: Mapping[str, Any]) -> str | TurnItem | None:
    """One ``update`` object (``params["update"]``) as turn output; None for an empty chunk."""
    kind = update.get("sessionUpdate")
    if kind == "agent_message_chunk":
        text = _text_of(update.get("content"))
        if text is not None:
            return text or None
    elif kind == "agent_thought_chunk":
        text = _text_of(update.get("content"))
        if text is not None:
            return TurnItem(ItemKind.THOUGHT, {"text": text}) if text else None
    elif kind in ("tool_call", "tool_call_update"):
        call_id = update.get("toolCallId")
        if isinstance(call_id, str) and call_id:
            data: dict[str, Any] = {"toolCallId": call_id}
            if kind == "tool_call":  # the start: every field present (ACP defaults)
                data.update(
                    title=update.get("title", ""),
                    kind=update.get("kind", "other"),
                    status=update.get("status", "pending"),
                    content=update.get("content") or [],
                    locations=update.get("locations") or [],
                )
            else:  # an update: only what it carries
                data.update({f: update[f] for f in TOOL_FIELDS if update.get(f) is not None})
            return TurnItem(ItemKind.TOOL_CALL, data, key=call_id)
    elif kind == "plan":
        entries = update.get("entries")
        if isinstance(entries, list):
            return TurnItem(
                ItemKind.PLAN,
                {
                    "entries": [
                        {
                            "content": e.get("content", ""),
                            "priority": e.get("priority", "medium"),
                            "status": e.get("status", "pending"),
                        }
                        for e in entries
                        if isinstance(e, Mapping)
                    ]
                },
                key="plan",  # a plan update replaces the whole plan (ACP)
            )
    return TurnItem(ItemKind.RAW, dict(update))
