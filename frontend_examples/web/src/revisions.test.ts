import { describe, expect, it } from "vitest";
import { cancellationShown, isNewer, RevisionBook, type Versioned } from "./revisions";

interface Q extends Versioned {
  autoRun: boolean;
}
type Kinds = { session: Versioned & { state: string }; queue: Q; cancellation: Versioned };

describe("R3: keep the highest revision per session and kind", () => {
  it("a larger revision is newer; lower and equal are not", () => {
    expect(isNewer(undefined, { revision: 0 })).toBe(true);
    expect(isNewer({ revision: 4 }, { revision: 5 })).toBe(true);
    expect(isNewer({ revision: 5 }, { revision: 5 })).toBe(false);
    expect(isNewer({ revision: 5 }, { revision: 4 })).toBe(false);
  });

  it("a late snapshot never overwrites a newer live event", () => {
    const book = new RevisionBook<Kinds>();
    expect(book.offer("s1", "queue", { revision: 7, autoRun: false })).toBe(true); // live event
    expect(book.offer("s1", "queue", { revision: 6, autoRun: true })).toBe(false); // old snapshot
    expect(book.get("s1", "queue")).toEqual({ revision: 7, autoRun: false });
  });

  it("an equal revision is the same state: the value held is kept", () => {
    const book = new RevisionBook<Kinds>();
    const first = { revision: 3, autoRun: true };
    book.offer("s1", "queue", first);
    expect(book.offer("s1", "queue", { revision: 3, autoRun: true })).toBe(false);
    expect(book.get("s1", "queue")).toBe(first);
  });

  it("kinds and sessions are independent", () => {
    const book = new RevisionBook<Kinds>();
    book.offer("s1", "queue", { revision: 100, autoRun: true });
    expect(book.offer("s1", "session", { revision: 2, state: "RUNNING" })).toBe(true);
    expect(book.offer("s1", "cancellation", { revision: 1 })).toBe(true);
    expect(book.offer("s2", "queue", { revision: 1, autoRun: false })).toBe(true);
    expect(book.get("s2", "queue")?.autoRun).toBe(false);
    expect(book.get("s1", "queue")?.revision).toBe(100);
  });

  it("handles revisions beyond 2^32 (cancellation epochs, R2)", () => {
    const book = new RevisionBook<Kinds>();
    book.offer("s1", "cancellation", { revision: 2 ** 32 + 5 });
    expect(book.offer("s1", "cancellation", { revision: 2 ** 32 + 4 })).toBe(false);
    expect(book.offer("s1", "cancellation", { revision: 2 * 2 ** 32 })).toBe(true);
  });

  it("forget drops one session only", () => {
    const book = new RevisionBook<Kinds>();
    book.offer("s1", "queue", { revision: 9, autoRun: true });
    book.offer("s10", "queue", { revision: 9, autoRun: true });
    book.forget("s1");
    expect(book.get("s1", "queue")).toBeUndefined();
    expect(book.get("s10", "queue")?.revision).toBe(9);
    expect(book.offer("s1", "queue", { revision: 1, autoRun: true })).toBe(true);
  });
});

describe("C1: Cancel shows the backend's pending, optimistic only until it answers", () => {
  it("is pending from the click until a newer backend value arrives", () => {
    const clicked = { clickedAt: 10 };
    expect(cancellationShown({ pending: false, revision: 10 }, clicked)).toEqual({
      pending: true,
      optimistic: true,
    });
    expect(cancellationShown({ pending: true, revision: 11 }, clicked)).toEqual({
      pending: true,
      optimistic: false,
    });
    expect(cancellationShown({ pending: false, revision: 12 }, clicked)).toEqual({
      pending: false,
      optimistic: false,
    });
  });

  it("without a click only the backend counts", () => {
    expect(cancellationShown({ pending: true, revision: 3 }, null).pending).toBe(true);
    expect(cancellationShown({ pending: false, revision: 3 }, null).pending).toBe(false);
    expect(cancellationShown(undefined, null).pending).toBe(false);
  });
});
