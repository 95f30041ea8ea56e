/**
 * Sends the page has made and the server has not yet shown (SPEC Q15, Q16): each is an
 * optimistic row, keyed by the `clientMessageId` the page made for it, until a row of the
 * server's — a turn or a queue entry — carries the same key. Rows are matched by that key only,
 * never by text or order: two sends of the same text are two rows, and a send the server answers
 * twice (a retry after a lost response; the server replays the first outcome) is still one.
 *
 * A send that failed on the network keeps its key: Retry sends it again with the SAME key (the
 * server answers what the first request did, if it got it), Discard forgets it. A send the server
 * refused (`userErrors`) is gone: nothing was made.
 *
 * Pure (no DOM): src/sends.test.ts covers it.
 */
import type { SendOutcome } from "./api";

/** How the page sent it: sendMessage (AUTO or STEER, Q16) or enqueueMessage (QUEUE). */
export type Delivery = "AUTO" | "STEER" | "QUEUE";

/** sending: the request is out; failed: it was lost (retryable); answered: the server said
 * what it did and its row has not reached the page yet. */
export type SendState = "sending" | "failed" | "answered";

export interface Send {
  readonly key: string;
  readonly sessionId: string;
  readonly content: string;
  readonly delivery: Delivery;
  state: SendState;
  /** Why it failed (state `failed`). */
  error: string | null;
  /** What the server did (state `answered`). */
  outcome: SendOutcome | null;
  /** Sent more than once (Retry). */
  retried: boolean;
}

/** Every key a server's rows carry: the session's turns and its queue's entries. */
export interface Rows {
  turns: readonly { clientMessageId: string | null }[];
  entries: readonly { clientMessageId: string | null }[];
}

export function keysOf(rows: Rows): Set<string> {
  const keys = new Set<string>();
  for (const row of [...rows.turns, ...rows.entries]) {
    if (row.clientMessageId !== null) keys.add(row.clientMessageId);
  }
  return keys;
}

/**
 * A new key: a UUID. `crypto.randomUUID` exists only in secure contexts (https, localhost); a page
 * served over plain http on another address makes a version-4 UUID from `getRandomValues`.
 */
export function newKey(source: Pick<Crypto, "getRandomValues"> & Partial<Crypto> = crypto): string {
  if (typeof source.randomUUID === "function") return source.randomUUID();
  const bytes = [...source.getRandomValues(new Uint8Array(16))];
  const hex = bytes
    .map((byte, i) => (i === 6 ? (byte & 0x0f) | 0x40 : i === 8 ? (byte & 0x3f) | 0x80 : byte))
    .map((byte) => byte.toString(16).padStart(2, "0"))
    .join("");
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

export class Outbox {
  private readonly sends = new Map<string, Send>();

  /** A new send, `sending`, in the order made. */
  add(sessionId: string, content: string, delivery: Delivery, key: string = newKey()): Send {
    const send: Send = {
      key,
      sessionId,
      content,
      delivery,
      state: "sending",
      error: null,
      outcome: null,
      retried: false,
    };
    this.sends.set(key, send);
    return send;
  }

  get(key: string): Send | undefined {
    return this.sends.get(key);
  }

  /** The session's sends still shown, oldest first. */
  of(sessionId: string): Send[] {
    return [...this.sends.values()].filter((send) => send.sessionId === sessionId);
  }

  /** Lost on the network (or a fault): kept, with its key, for Retry or Discard. */
  failed(key: string, error: string): void {
    const send = this.sends.get(key);
    if (send) Object.assign(send, { state: "failed", error });
  }

  /** Sent again with the same key. Answers the send, or undefined when it is gone. */
  retry(key: string): Send | undefined {
    const send = this.sends.get(key);
    if (send?.state !== "failed") return undefined;
    return Object.assign(send, { state: "sending", error: null, retried: true });
  }

  /**
   * The server answered. A steered message has no row of its own (it is an item of the running
   * turn), so it goes at once; otherwise it waits for its turn or entry (`settle`).
   */
  answered(key: string, outcome: SendOutcome | null): void {
    const send = this.sends.get(key);
    if (!send) return;
    if (outcome === "STEERED") this.sends.delete(key);
    else Object.assign(send, { state: "answered", outcome, error: null });
  }

  /** Gone: refused by the server, or discarded by the user. */
  forget(key: string): void {
    this.sends.delete(key);
  }

  /** Drop the session's sends whose key a server row carries; answers whether any went. A
   * failed send the server did get (its row came) goes too: nothing is left to retry. */
  settle(sessionId: string, keys: ReadonlySet<string>): boolean {
    let settled = false;
    for (const send of this.of(sessionId)) {
      if (keys.has(send.key)) {
        this.sends.delete(send.key);
        settled = true;
      }
    }
    return settled;
  }
}
