import { describe, expect, it } from "vitest";
import { keysOf, newKey, Outbox } from "./sends";

const rows = (turns: (string | null)[], entries: (string | null)[] = []) =>
  keysOf({
    turns: turns.map((clientMessageId) => ({ clientMessageId })),
    entries: entries.map((clientMessageId) => ({ clientMessageId })),
  });

describe("Q15: optimistic sends matched by clientMessageId", () => {
  it("a send stays until a server row carries its key, whatever its text", () => {
    const box = new Outbox();
    const one = box.add("s1", "same text", "AUTO", "k1");
    const two = box.add("s1", "same text", "AUTO", "k2");
    expect(box.of("s1").map((s) => s.key)).toEqual(["k1", "k2"]);
    // A server turn with the same text but no key (another tab's send) matches nothing.
    expect(box.settle("s1", rows([null]))).toBe(false);
    expect(box.settle("s1", rows(["k2"]))).toBe(true);
    expect(box.of("s1")).toEqual([one]);
    expect(box.settle("s1", rows([], ["k1"]))).toBe(true); // a queued entry matches too
    expect(box.of("s1")).toEqual([]);
    expect(two.state).toBe("sending");
  });

  it("sessions are independent", () => {
    const box = new Outbox();
    box.add("s1", "a", "AUTO", "k");
    expect(box.settle("s2", rows(["k"]))).toBe(false);
    expect(box.of("s1")).toHaveLength(1);
    expect(box.of("s2")).toEqual([]);
  });

  it("a lost send keeps its key: Retry sends it again with the same one", () => {
    const box = new Outbox();
    box.add("s1", "a", "QUEUE", "k");
    expect(box.retry("k")).toBeUndefined(); // only a failed send is retried
    box.failed("k", "Failed to fetch");
    expect(box.get("k")).toMatchObject({ state: "failed", error: "Failed to fetch" });
    expect(box.retry("k")).toMatchObject({ key: "k", state: "sending", retried: true });
    box.answered("k", "QUEUED");
    expect(box.get("k")).toMatchObject({ state: "answered", outcome: "QUEUED" });
    expect(box.settle("s1", rows([], ["k"]))).toBe(true);
  });

  it("a lost send whose row came anyway (the server got it) needs no retry", () => {
    const box = new Outbox();
    box.add("s1", "a", "AUTO", "k");
    box.failed("k", "Failed to fetch");
    box.settle("s1", rows(["k"]));
    expect(box.get("k")).toBeUndefined();
  });

  it("Q16: a steered message has no row of its own and goes when answered", () => {
    const box = new Outbox();
    box.add("s1", "look here", "STEER", "k");
    box.answered("k", "STEERED");
    expect(box.of("s1")).toEqual([]);
    box.add("s1", "later", "STEER", "k2");
    box.answered("k2", "QUEUED"); // the agent did not take it: its entry will come
    expect(box.of("s1")).toHaveLength(1);
  });

  it("Discard forgets it", () => {
    const box = new Outbox();
    box.add("s1", "a", "AUTO", "k");
    box.failed("k", "offline");
    box.forget("k");
    expect(box.of("s1")).toEqual([]);
  });

  it("keys are UUIDs, also where randomUUID is missing (plain http)", () => {
    const uuid = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;
    expect(newKey()).toMatch(uuid);
    const insecure = { getRandomValues: crypto.getRandomValues.bind(crypto) };
    const keys = new Set(Array.from({ length: 50 }, () => newKey(insecure)));
    expect(keys.size).toBe(50);
    for (const key of keys) expect(key).toMatch(uuid);
  });
});
