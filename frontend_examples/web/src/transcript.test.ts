import { describe, expect, it } from "vitest";
import {
  appendOutput,
  codePoints,
  KEPT_TURNS,
  resumeFrom,
  transcripts,
  type OutputChunk,
} from "./transcript";

const chunk = (offset: number, text: string, done = false, turnId = "t1"): OutputChunk => ({
  turnId,
  offset,
  text,
  done,
  status: done ? "COMPLETED" : "RUNNING",
});

describe("O2: turn output is placed by offset, in code points", () => {
  it("appends contiguous chunks and trims overlaps", () => {
    let out = appendOutput(undefined, chunk(0, "Hel"));
    out = appendOutput(out, chunk(3, "lo"));
    out = appendOutput(out, chunk(1, "ello, w")); // overlaps what we have
    expect(out).toMatchObject({ text: "Hello, w", end: 8 });
    expect(appendOutput(out, chunk(2, "ll"))).toBe(out); // entirely known
  });

  it("counts code points, not UTF-16 units", () => {
    expect(codePoints("a🌍b")).toBe(3);
    let out = appendOutput(undefined, chunk(0, "🌍é"));
    expect(out.end).toBe(2);
    out = appendOutput(out, chunk(1, "é🎉x")); // overlap of one character, after an emoji
    expect(out).toMatchObject({ text: "🌍é🎉x", end: 4 });
    out = appendOutput(out, chunk(4, "\r\n"));
    expect(out).toMatchObject({ text: "🌍é🎉x\r\n", end: 6 });
  });

  it("ignores a chunk that would leave a gap", () => {
    const out = appendOutput(appendOutput(undefined, chunk(0, "ab")), chunk(5, "xyz"));
    expect(out.text).toBe("ab");
  });

  it("a finished output is final", () => {
    let out = appendOutput(undefined, chunk(0, "all of it", true));
    expect(out).toMatchObject({ done: true, status: "COMPLETED" });
    out = appendOutput(out, chunk(0, "all"));
    expect(out).toMatchObject({ text: "all of it", done: true });
  });

  it("refuses a chunk of another turn", () => {
    const out = appendOutput(undefined, chunk(0, "x"));
    expect(() => appendOutput(out, chunk(1, "y", false, "t2"))).toThrow();
  });
});

describe("O4: a reload resumes where the page stopped", () => {
  class MemoryStore {
    readonly values = new Map<string, string>();
    getItem(key: string): string | null {
      return this.values.get(key) ?? null;
    }
    setItem(key: string, value: string): void {
      this.values.set(key, value);
    }
  }

  it("a running turn resumes by turn id and offset; an ended one follows the next turns", () => {
    expect(resumeFrom("s", undefined)).toEqual({ sessionId: "s" });
    const running = appendOutput(undefined, chunk(0, "🌍 hi"));
    expect(resumeFrom("s", running)).toEqual({ sessionId: "s", turnId: "t1", afterOffset: 4 });
    const ended = appendOutput(running, chunk(4, "!", true));
    expect(resumeFrom("s", ended)).toEqual({ sessionId: "s" });
  });

  it("keeps text and offset together across a reload (a new store on the same storage)", () => {
    const store = new MemoryStore();
    const page = transcripts(store, "s");
    expect(page.offer(chunk(0, "héllo "))).toBe(true);
    page.save();
    expect(page.offer(chunk(6, "wörld"))).toBe(true); // not saved yet: the reload replays it
    const reloaded = transcripts(store, "s");
    expect(reloaded.newest()).toMatchObject({ text: "héllo ", end: 6 });
    expect(resumeFrom("s", reloaded.newest())).toMatchObject({ afterOffset: 6 });
    expect(reloaded.offer(chunk(6, "wörld"))).toBe(true);
    expect(reloaded.offer(chunk(6, "wörld"))).toBe(false); // a duplicate changes nothing
    expect(reloaded.get("t1")?.text).toBe("héllo wörld");
    expect(transcripts(store, "other").newest()).toBeUndefined();
  });

  it("keeps the newest turns only, in the order they came", () => {
    const page = transcripts(null, "s");
    for (let i = 0; i <= KEPT_TURNS; i++) page.offer(chunk(0, `turn ${i}`, false, `t${i}`));
    expect(page.get("t0")).toBeUndefined();
    page.offer(chunk(6, " more", false, "t1")); // an older turn's chunk does not become newest
    expect(page.newest()?.turnId).toBe(`t${KEPT_TURNS}`);
  });

  it("an unreadable stored value starts again from offset 0", () => {
    const store = new MemoryStore();
    store.setItem("turnqueue.output.s", "{not json");
    expect(transcripts(store, "s").newest()).toBeUndefined();
  });
});
