/**
 * A turn's output, as the page shows it, and where to resume it (SPEC O2, O4). Pure: no DOM, no
 * network; the storage is passed in.
 *
 * `turnOutput` chunks carry no revision (R1): their `offset` places them. Offsets count
 * characters the way the server does, in Unicode code points, not the UTF-16 units of a
 * JavaScript string's `.length` (an emoji is one character, but `"🌍".length` is 2).
 *
 * To resume exactly, keep the text you show *and* its length together (here in
 * `sessionStorage`, which survives a reload), and subscribe with
 * `turnOutput(sessionId, turnId, afterOffset: <that length>)`: the server sends exactly what
 * follows. A stored pair that is older than the screen only means a longer replay, never a gap
 * or a duplicate, so writing it lazily is safe.
 */

export type TurnStatus = "RUNNING" | "COMPLETED" | "CANCELLED" | "FAILED";

/** A piece of a turn's output: `text` starts at character `offset` of the whole output. */
export interface OutputChunk {
  readonly turnId: string;
  readonly offset: number;
  readonly text: string;
  readonly done: boolean;
  readonly status: TurnStatus;
}

/** What is known of one turn's output: `text` is its first `end` characters. */
export interface TurnOutput {
  readonly turnId: string;
  readonly text: string;
  /** The length of `text` in code points: the `afterOffset` to resume from. */
  readonly end: number;
  readonly done: boolean;
  readonly status: TurnStatus;
}

/** The length of `text` in code points (what the server's offsets count). */
export function codePoints(text: string): number {
  let count = 0;
  for (const _ of text) count++;
  return count;
}

/** `text` without its first `count` code points. */
function dropCodePoints(text: string, count: number): string {
  let index = 0;
  for (let i = 0; i < count && index < text.length; i++) {
    index += (text.codePointAt(index) ?? 0) > 0xffff ? 2 : 1;
  }
  return text.slice(index);
}

/**
 * Add a chunk to what is known of a turn's output. What is already known is trimmed off (an
 * overlap), a chunk that would leave a gap is ignored, and a finished output is final.
 */
export function appendOutput(current: TurnOutput | undefined, chunk: OutputChunk): TurnOutput {
  if (current !== undefined && current.turnId !== chunk.turnId) {
    throw new Error(`chunk of turn ${chunk.turnId} offered to turn ${current.turnId}`);
  }
  const empty = { turnId: chunk.turnId, text: "", end: 0, done: false, status: "RUNNING" as const };
  const known = current ?? empty;
  if (known.done || chunk.offset > known.end) return known;
  const fresh = dropCodePoints(chunk.text, known.end - chunk.offset);
  if (fresh === "" && !chunk.done && current !== undefined) return current;
  return {
    turnId: chunk.turnId,
    text: known.text + fresh,
    end: known.end + codePoints(fresh),
    done: chunk.done,
    status: chunk.done ? chunk.status : "RUNNING",
  };
}

/** What a turn stream needs to resume: the turn, the offset after what is held, its end. */
export interface Resumable {
  readonly turnId: string;
  readonly end: number;
  readonly done: boolean;
}

/**
 * The variables of the next `turnOutput` (or `turnItems`) subscription, given the newest turn
 * the page holds.
 */
export function resumeFrom(
  sessionId: string,
  newest: Resumable | undefined,
): { sessionId: string; turnId?: string; afterOffset?: number } {
  // A running turn resumes by its id and offset: `afterOffset` without `turnId` applies to the
  // session's *current* turn, which may be a later one by now. Once it has ended (or with no
  // turn yet), follow the current turn and the later ones, each from offset 0.
  if (newest === undefined || newest.done) return { sessionId };
  return { sessionId, turnId: newest.turnId, afterOffset: newest.end };
}

/** Only the `getItem`/`setItem` of a `Storage` (sessionStorage in the page, a Map in tests). */
export interface KeyValueStore {
  getItem(key: string): string | null;
  setItem(key: string, value: string): void;
}

/** How many of a session's newest turns are kept (the page shows the current one). */
export const KEPT_TURNS = 3;

/**
 * The newest turns of one session as one stream has told them (`T`: a turn's output, or its
 * items), saved in `store` under `key`; `merge` adds a chunk (and answers the value it was
 * given when nothing changed).
 */
export class TurnStore<T extends Resumable, C extends { readonly turnId: string }> {
  private turns: T[];

  constructor(
    private readonly store: KeyValueStore | null,
    private readonly key: string,
    private readonly merge: (current: T | undefined, chunk: C) => T,
  ) {
    this.turns = TurnStore.load<T>(store?.getItem(key) ?? null);
  }

  private static load<T>(saved: string | null): T[] {
    try {
      const value: unknown = saved === null ? [] : JSON.parse(saved);
      return Array.isArray(value) ? (value as T[]) : [];
    } catch {
      return []; // unreadable: start again from offset 0
    }
  }

  get(turnId: string): T | undefined {
    return this.turns.find((t) => t.turnId === turnId);
  }

  /** The newest turn heard of (where `resumeFrom` continues). */
  newest(): T | undefined {
    return this.turns.at(-1);
  }

  /** Merge a chunk; answers whether anything changed. */
  offer(chunk: C): boolean {
    const current = this.get(chunk.turnId);
    const next = this.merge(current, chunk);
    if (next === current) return false;
    this.turns =
      current === undefined
        ? [...this.turns, next].slice(-KEPT_TURNS)
        : this.turns.map((t) => (t === current ? next : t));
    return true;
  }

  /** Write what is held with its offsets (together, so a reload resumes exactly). */
  save(): void {
    try {
      this.store?.setItem(this.key, JSON.stringify(this.turns));
    } catch {
      // Full (a very long output): a reload then replays from what was saved last.
    }
  }
}

/** One session's turn outputs, kept under `turnqueue.output.<sessionId>`. */
export function transcripts(
  store: KeyValueStore | null,
  sessionId: string,
): TurnStore<TurnOutput, OutputChunk> {
  return new TurnStore(store, `turnqueue.output.${sessionId}`, appendOutput);
}
