"""A turn's items as the terminal client shows them (A3): ``turnItems`` chunks folded by index,
and a pending approval (A6) with its options.

Each chunk of ``turnItems`` says what some log entries changed (``TurnItemsChunk``): an item at a
new index is added; one at a known index replaces the old, except message and thought items,
whose ``text`` is only what was added. The client keeps the last ``nextOffset`` per turn: a
reconnect passes it as ``afterOffset`` and misses nothing (O2).

Lines printed (the turn's text itself comes from ``turnOutput``)::

    item 1 tool call [call-1] Read file (read): in_progress
    item 2 plan: [x] step 0 | [>] step 1 | [ ] step 2
    item 0 thought: 'thinking'
    approval 5d1c…: 'Write notes.txt' options: allow=Allow (allow_once), reject=Reject (reject_once)
"""

from __future__ import annotations

from typing import Any

_MARKS = {"completed": "x", "in_progress": ">"}


class TurnItems:
    """The items of the turns followed, folded from their chunks; where each one resumes."""

    def __init__(self) -> None:
        self.items: dict[str, dict[int, dict[str, Any]]] = {}
        #: per turn, the log position to resume after (``afterOffset``)
        self.resume_at: dict[str, int] = {}

    def apply(self, chunk: dict[str, Any]) -> list[dict[str, Any]]:
        """Fold ``chunk`` in; the changed items as they now are (each once, in index order)."""
        turn = chunk["turnId"]
        items = self.items.setdefault(turn, {})
        changed: dict[int, dict[str, Any]] = {}
        for item in chunk["items"]:
            index = item["index"]
            old = items.get(index)
            if old is not None and item["kind"] in ("MESSAGE", "THOUGHT"):
                old["text"] += item["text"]
            else:
                items[index] = dict(item)
            changed[index] = items[index]
        self.resume_at[turn] = chunk["nextOffset"]
        return [changed[i] for i in sorted(changed)]

    def shown(self, turn_id: str) -> list[dict[str, Any]]:
        items = self.items.get(turn_id, {})
        return [items[i] for i in range(len(items))]


def describe_item(item: dict[str, Any]) -> str | None:
    """One line for an item; None for message items (their text comes from turnOutput)."""
    kind = item["kind"]
    head = f"item {item['index']}"
    if kind == "TOOL_CALL":
        return (
            f"{head} tool call [{item['toolCallId']}] {item['title']} ({item['toolKind']}): "
            f"{item['status']}"
        )
    if kind == "PLAN":
        steps = " | ".join(
            f"[{_MARKS.get(e['status'], ' ')}] {e['content']}" for e in item["entries"]
        )
        return f"{head} plan: {steps}"
    if kind == "THOUGHT":
        return f"{head} thought: {item['text']!r}"
    if kind == "RAW":
        return f"{head} raw: {item['json']}"
    return None


def describe_approval(approval: dict[str, Any]) -> str:
    options = ", ".join(f"{o['id']}={o['name']} ({o['kind']})" for o in approval["options"])
    return f"approval {approval['id'][:8]}: {approval['title']!r} options: {options}"
