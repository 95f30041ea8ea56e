"""A turn's items (A3) folded from its log (O1).

Two folds turn the log into the list a UI shows (``Turn.items``): an item with a ``key`` (a tool
call's id) *updates* the earlier item with that key in place (its data merged over the old: an
ACP ``tool_call_update`` carries only what changed); consecutive MESSAGE (or THOUGHT) pieces
without a key are joined into one item. :meth:`ItemFold.add` answers what each piece changed,
as ``turnItems`` streams it (O2): the item's index and either the item whole (new, or updated
by key) or, for a joined text item, only the text it gained. Any instance folds any turn's log
the same way, running or ended.
"""

from __future__ import annotations

from turnqueue.domain import ItemKind, OutputRecord, TurnItem

#: Items kept per turn; beyond it new items are dropped (updates of kept ones still apply).
MAX_ITEMS = 10_000
#: Characters kept in one joined MESSAGE/THOUGHT item.
MAX_TEXT_CHARS = 1_000_000

_JOINED = frozenset({ItemKind.MESSAGE, ItemKind.THOUGHT})

#: What one piece changed: the item's index, and the item (for a joined text item that already
#: existed: only the text it gained).
ItemChange = tuple[int, TurnItem]


class ItemFold:
    """The items of one turn, folded piece by piece.

    ``keep_text=False`` (a stream's fold) keeps only what placing the next pieces needs (sizes
    and keyed items), not the joined text nor unkeyed items' data (nothing later refers to a
    plan or a raw update): a subscriber never re-sends what it already sent.
    """

    def __init__(self, *, keep_text: bool = True) -> None:
        self._keep_text = keep_text
        self._items: list[TurnItem] = []
        # Text of a joined MESSAGE/THOUGHT item by index, in parts: joining on each chunk would
        # copy the whole text every time (quadratic in the number of chunks).
        self._parts: dict[int, list[str]] = {}
        self._sizes: dict[int, int] = {}
        self._by_key: dict[str, int] = {}

    def add_record(self, record: OutputRecord) -> ItemChange | None:
        """Fold the piece a log record holds (a MESSAGE record keeps its text in ``text``)."""
        if record.kind is ItemKind.MESSAGE and record.data is None:
            return self.add(TurnItem(ItemKind.MESSAGE, {"text": record.text}))
        return self.add(TurnItem(record.kind, dict(record.data or {}), record.key))

    def add(self, item: TurnItem) -> ItemChange | None:
        """Fold ``item`` in; what it changed, or None when it changed nothing (beyond a bound)."""
        if item.key is not None and item.key in self._by_key:
            index = self._by_key[item.key]
            old = self._items[index]
            merged = TurnItem(old.kind, {**old.data, **item.data}, old.key)
            self._items[index] = merged
            return index, merged
        last = len(self._items) - 1
        if item.key is None and item.kind in _JOINED:
            text = str(item.data.get("text", ""))
            if last in self._sizes and self._items[last].kind is item.kind:
                room = MAX_TEXT_CHARS - self._sizes[last]
                gained = text[: max(room, 0)]
                if not gained:
                    return None
                if self._keep_text:
                    self._parts[last].append(gained)
                self._sizes[last] += len(gained)
                return last, TurnItem(item.kind, {"text": gained})
            if len(self._items) >= MAX_ITEMS:
                return None
            text = text[:MAX_TEXT_CHARS]
            index = last + 1
            self._items.append(TurnItem(item.kind, {}))
            self._parts[index] = [text] if self._keep_text else []
            self._sizes[index] = len(text)
            return index, TurnItem(item.kind, {"text": text})
        if len(self._items) >= MAX_ITEMS:
            return None
        if item.key is not None:
            self._by_key[item.key] = len(self._items)
        kept = item if item.key is not None or self._keep_text else TurnItem(item.kind, {})
        self._items.append(kept)
        return len(self._items) - 1, item

    def snapshot(self) -> tuple[TurnItem, ...]:
        """The items as they are now (only for a fold that keeps its text)."""
        return tuple(
            TurnItem(it.kind, {"text": "".join(self._parts[i])}) if i in self._parts else it
            for i, it in enumerate(self._items)
        )


def fold_records(records: list[OutputRecord]) -> tuple[TurnItem, ...]:
    """A turn's items from its whole log (``Turn.items``)."""
    fold = ItemFold()
    for record in records:
        fold.add_record(record)
    return fold.snapshot()
