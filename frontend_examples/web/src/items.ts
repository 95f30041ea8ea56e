/**
 * A turn's structured output (SPEC A3) as `turnItems` streams it: messages, thoughts, tool
 * calls with their updates, plans. Pure: no DOM, no network.
 *
 * Each chunk covers the log entries from `offset` to `nextOffset` (entries, not characters) and
 * lists the items they added or changed. Apply each by its `index`: a new index is a new item;
 * a known one is replaced (a tool call's new status, a new plan), except a message or a thought,
 * whose `text` in a chunk is only what was added. Resume like the output: `turnItems(sessionId,
 * turnId, afterOffset: <the last nextOffset>)` (see `resumeFrom` in transcript.ts).
 */
import type { TurnStatus } from "./transcript";

/** The fields every item has; the page's fragment adds the rest per `__typename`. */
export interface Item {
  readonly __typename: string;
  readonly index: number;
}

export interface ItemsChunk<I extends Item> {
  readonly turnId: string;
  readonly offset: number;
  readonly nextOffset: number;
  readonly items: readonly I[];
  readonly done: boolean;
  readonly status: TurnStatus;
}

/** What is known of one turn's items: the log up to `end` folded. */
export interface TurnItems<I extends Item> {
  readonly turnId: string;
  readonly items: readonly I[];
  readonly end: number;
  readonly done: boolean;
  readonly status: TurnStatus;
}

/** Items whose chunks carry only their new text. */
const APPENDED = new Set(["MessageItem", "ThoughtItem"]);

function textOf(item: Item): string {
  return "text" in item && typeof item.text === "string" ? item.text : "";
}

/**
 * Fold a chunk into what is known of a turn's items. A chunk must start where the known log
 * ends (`offset === end`): one already known only brings its `done`, and one that would leave a
 * gap or overlap part of what is known is ignored (an exact resume never sends either).
 */
export function applyItems<I extends Item>(
  current: TurnItems<I> | undefined,
  chunk: ItemsChunk<I>,
): TurnItems<I> {
  if (current !== undefined && current.turnId !== chunk.turnId) {
    throw new Error(`items of turn ${chunk.turnId} offered to turn ${current.turnId}`);
  }
  const known = current ?? {
    turnId: chunk.turnId,
    items: [],
    end: 0,
    done: false,
    status: "RUNNING" as const,
  };
  if (known.done) return known;
  if (chunk.nextOffset <= known.end) {
    return chunk.done ? { ...known, done: true, status: chunk.status } : known;
  }
  if (chunk.offset !== known.end) return known;
  const items = [...known.items];
  for (const item of chunk.items) {
    const old = items[item.index];
    items[item.index] =
      old !== undefined && APPENDED.has(item.__typename)
        ? { ...item, text: textOf(old) + textOf(item) }
        : item;
  }
  return {
    turnId: chunk.turnId,
    items,
    end: chunk.nextOffset,
    done: chunk.done,
    status: chunk.done ? chunk.status : "RUNNING",
  };
}
