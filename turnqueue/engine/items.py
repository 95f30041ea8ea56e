"""A turn's structured output in memory (A3): its :class:`TurnItem`s in order, folded by key.

The runner adds every item its agent streams. Two folds keep the list what a UI shows:

- an item with a ``key`` (a tool call's id) *updates* the earlier item with that key in place
  (its data merged over the old: an ACP ``tool_call_update`` carries only what changed);
- consecutive MESSAGE (or THOUGHT) chunks without a key are joined into one item.

Until the durable output log (SPEC O1) stores items, the folds of the most recent turns stay
here after their end (bounded, :data:`RECENT_TURNS`), so ``Turn.items`` still answers for a turn
that just ended; an older or another instance's turn answers no items.
"""

from __future__ import annotations

from collections import OrderedDict

from turnqueue.domain import ItemKind, TurnItem

#: Items kept per turn; beyond it new items are dropped (updates of kept ones still apply).
MAX_ITEMS = 10_000
#: Characters kept in one joined MESSAGE/THOUGHT item.
MAX_TEXT_CHARS = 1_000_000
#: Ended turns whose items are remembered in this process.
RECENT_TURNS = 256

_JOINED = frozenset({ItemKind.MESSAGE, ItemKind.THOUGHT})
_recent: OrderedDict[str, ItemFold] = OrderedDict()


class ItemFold:
    def __init__(self, turn_id: str) -> None:
        self.turn_id = turn_id
        self._items: list[TurnItem] = []
        # Text of a joined MESSAGE/THOUGHT item by index, in parts: joining on each chunk would
        # copy the whole text every time (quadratic in the number of chunks).
        self._parts: dict[int, list[str]] = {}
        self._sizes: dict[int, int] = {}
        self._by_key: dict[str, int] = {}
        _recent[turn_id] = self
        while len(_recent) > RECENT_TURNS:
            _recent.popitem(last=False)

    def add(self, item: TurnItem) -> None:
        if item.key is not None and item.key in self._by_key:
            index = self._by_key[item.key]
            old = self._items[index]
            self._items[index] = TurnItem(old.kind, {**old.data, **item.data}, old.key)
            return
        last = len(self._items) - 1
        if item.key is None and item.kind in _JOINED:
            text = str(item.data.get("text", ""))
            if last in self._parts and self._items[last].kind is item.kind:
                room = MAX_TEXT_CHARS - self._sizes[last]
                if room > 0:
                    self._parts[last].append(text[:room])
                    self._sizes[last] += min(len(text), room)
                return
            if len(self._items) >= MAX_ITEMS:
                return
            self._items.append(item)
            self._parts[last + 1] = [text[:MAX_TEXT_CHARS]]
            self._sizes[last + 1] = min(len(text), MAX_TEXT_CHARS)
            return
        if len(self._items) >= MAX_ITEMS:
            return
        if item.key is not None:
            self._by_key[item.key] = len(self._items)
        self._items.append(item)

    def snapshot(self) -> tuple[TurnItem, ...]:
        return tuple(
            TurnItem(it.kind, {"text": "".join(self._parts[i])}) if i in self._parts else it
            for i, it in enumerate(self._items)
        )


def recent_items(turn_id: str) -> tuple[TurnItem, ...] | None:
    """The items of a turn run by this process recently (running or ended), else None."""
    fold = _recent.get(turn_id)
    return fold.snapshot() if fold is not None else None
