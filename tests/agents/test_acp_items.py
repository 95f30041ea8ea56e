"""A3: ACP updates as turn items, and their fold (order kept, upsert by key, chunks joined)."""

from __future__ import annotations

from turnqueue.agents.acp_run import to_output
from turnqueue.domain import ItemKind, TurnItem
from turnqueue.engine.items import MAX_ITEMS, ItemFold


def test_a3_updates_map_to_text_and_items() -> None:
    text = {"type": "text", "text": "hi"}
    assert to_output({"sessionUpdate": "agent_message_chunk", "content": text}) == "hi"
    assert to_output({"sessionUpdate": "agent_thought_chunk", "content": text}) == TurnItem(
        ItemKind.THOUGHT, {"text": "hi"}
    )
    start = to_output({"sessionUpdate": "tool_call", "toolCallId": "c1", "title": "Run"})
    assert start == TurnItem(
        ItemKind.TOOL_CALL,
        {
            "toolCallId": "c1",
            "title": "Run",
            "kind": "other",
            "status": "pending",
            "content": [],
            "locations": [],
        },
        key="c1",
    )
    update = to_output(
        {"sessionUpdate": "tool_call_update", "toolCallId": "c1", "status": "failed"}
    )
    assert update == TurnItem(ItemKind.TOOL_CALL, {"toolCallId": "c1", "status": "failed"}, "c1")
    plan = to_output({"sessionUpdate": "plan", "entries": [{"content": "a", "status": "pending"}]})
    assert isinstance(plan, TurnItem) and plan.kind is ItemKind.PLAN
    assert plan.data["entries"] == [{"content": "a", "priority": "medium", "status": "pending"}]


def test_a3_unknown_or_malformed_updates_are_kept_raw_never_dropped() -> None:
    for update in (
        {"sessionUpdate": "usage_update", "used": 3},
        {"sessionUpdate": "agent_message_chunk", "content": {"type": "image", "data": "…"}},
        {"sessionUpdate": "tool_call"},  # no id
        {"nothing": True},
    ):
        item = to_output(update)
        assert item == TurnItem(ItemKind.RAW, update), update


def test_a3_fold_keeps_order_upserts_by_key_and_joins_chunks() -> None:
    fold = ItemFold()
    changes = [fold.add(piece) for piece in _pieces()]
    expected = (
        TurnItem(ItemKind.MESSAGE, {"text": "ab"}),
        TurnItem(ItemKind.TOOL_CALL, {"toolCallId": "1", "status": "completed"}, "1"),
        TurnItem(ItemKind.MESSAGE, {"text": "c"}),
        TurnItem(ItemKind.THOUGHT, {"text": "xy"}),
    )
    assert fold.snapshot() == expected
    # What each piece changed, as turnItems sends it: text items only their new text, an
    # update by key the whole item, folded.
    assert changes == [
        (0, TurnItem(ItemKind.MESSAGE, {"text": "a"})),
        (0, TurnItem(ItemKind.MESSAGE, {"text": "b"})),
        (1, TurnItem(ItemKind.TOOL_CALL, {"toolCallId": "1", "status": "pending"}, "1")),
        (2, TurnItem(ItemKind.MESSAGE, {"text": "c"})),
        (1, expected[1]),
        (3, TurnItem(ItemKind.THOUGHT, {"text": "x"})),
        (3, TurnItem(ItemKind.THOUGHT, {"text": "y"})),
    ]
    lean = ItemFold(keep_text=False)  # a stream's fold: the same changes, without the text
    assert [lean.add(piece) for piece in _pieces()] == changes


def _pieces() -> list[TurnItem]:
    return [
        TurnItem(ItemKind.MESSAGE, {"text": "a"}),
        TurnItem(ItemKind.MESSAGE, {"text": "b"}),
        TurnItem(ItemKind.TOOL_CALL, {"toolCallId": "1", "status": "pending"}, "1"),
        TurnItem(ItemKind.MESSAGE, {"text": "c"}),
        TurnItem(ItemKind.TOOL_CALL, {"status": "completed"}, "1"),
        TurnItem(ItemKind.THOUGHT, {"text": "x"}),
        TurnItem(ItemKind.THOUGHT, {"text": "y"}),
    ]


def test_a3_fold_is_bounded() -> None:
    fold = ItemFold()
    for i in range(MAX_ITEMS + 10):
        fold.add(TurnItem(ItemKind.RAW, {"i": i}))
    fold.add(TurnItem(ItemKind.MESSAGE, {"text": "dropped"}))
    assert len(fold.snapshot()) == MAX_ITEMS
