"""A3: ACP updates as turn items, and their fold (order kept, upsert by key, chunks joined)."""

from __future__ import annotations

from turnqueue.agents.acp_updates import to_output
from turnqueue.domain import ItemKind, TurnItem
from turnqueue.engine.items import MAX_ITEMS, ItemFold, recent_items


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
    fold = ItemFold("turn-fold")
    fold.add(TurnItem(ItemKind.MESSAGE, {"text": "a"}))
    fold.add(TurnItem(ItemKind.MESSAGE, {"text": "b"}))
    fold.add(TurnItem(ItemKind.TOOL_CALL, {"toolCallId": "1", "status": "pending"}, "1"))
    fold.add(TurnItem(ItemKind.MESSAGE, {"text": "c"}))
    fold.add(TurnItem(ItemKind.TOOL_CALL, {"status": "completed"}, "1"))
    fold.add(TurnItem(ItemKind.THOUGHT, {"text": "x"}))
    fold.add(TurnItem(ItemKind.THOUGHT, {"text": "y"}))
    expected = (
        TurnItem(ItemKind.MESSAGE, {"text": "ab"}),
        TurnItem(ItemKind.TOOL_CALL, {"toolCallId": "1", "status": "completed"}, "1"),
        TurnItem(ItemKind.MESSAGE, {"text": "c"}),
        TurnItem(ItemKind.THOUGHT, {"text": "xy"}),
    )
    assert fold.snapshot() == expected
    assert recent_items("turn-fold") == expected


def test_a3_fold_is_bounded() -> None:
    fold = ItemFold("turn-bounded")
    for i in range(MAX_ITEMS + 10):
        fold.add(TurnItem(ItemKind.RAW, {"i": i}))
    fold.add(TurnItem(ItemKind.MESSAGE, {"text": "dropped"}))
    assert len(fold.snapshot()) == MAX_ITEMS
