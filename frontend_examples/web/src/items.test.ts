import { describe, expect, it } from "vitest";
import { applyItems, type Item, type ItemsChunk } from "./items";

type TestItem = Item & { text?: string; title?: string; status?: string };

const chunk = (
  offset: number,
  nextOffset: number,
  items: TestItem[],
  done = false,
): ItemsChunk<TestItem> => ({
  turnId: "t1",
  offset,
  nextOffset,
  items,
  done,
  status: done ? "COMPLETED" : "RUNNING",
});
const tool = (status: string): TestItem => ({
  __typename: "ToolCallItem",
  index: 0,
  title: "Read file",
  status,
});
const message = (text: string): TestItem => ({ __typename: "MessageItem", index: 1, text });

describe("A3: a turn's items folded by index, resumed by log offset", () => {
  it("replaces a tool call in place and appends a message's text", () => {
    let turn = applyItems(undefined, chunk(0, 1, [tool("pending")]));
    turn = applyItems(turn, chunk(1, 3, [tool("in_progress"), message("read ")]));
    turn = applyItems(turn, chunk(3, 5, [tool("completed"), message("it")]));
    expect(turn.items).toEqual([tool("completed"), message("read it")]);
    expect(turn.end).toBe(5);
  });

  it("ignores what is already known, a gap, and a partial overlap", () => {
    const turn = applyItems(applyItems(undefined, chunk(0, 2, [message("a")])), chunk(2, 3, []));
    expect(applyItems(turn, chunk(0, 2, [message("a")]))).toBe(turn); // a replay
    expect(applyItems(turn, chunk(5, 6, [message("b")]))).toBe(turn); // a gap
    expect(applyItems(turn, chunk(1, 4, [message("b")]))).toBe(turn); // part known
  });

  it("takes the end from a message that only ends the turn", () => {
    const turn = applyItems(undefined, chunk(0, 2, [tool("completed")]));
    expect(applyItems(turn, chunk(2, 2, [], true))).toMatchObject({ done: true, end: 2 });
    const done = applyItems(turn, chunk(1, 2, [], true));
    expect(done).toMatchObject({ done: true, status: "COMPLETED" });
    expect(applyItems(done, chunk(2, 3, [message("late")]))).toBe(done); // final
  });
});
