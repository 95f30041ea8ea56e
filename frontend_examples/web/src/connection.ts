/**
 * The connection's real state, as the page shows it (SPEC U2), and what wakes a waiting
 * reconnect. Pure: no DOM, no network; the clock and timers are passed in.
 *
 * - `connecting`: the first connection is being made;
 * - `live`: the socket is open and acknowledged;
 * - `reconnecting`: it was lost (a dropped network, a server restart, a dead socket found after
 *   sleep) and the client retries with a growing wait;
 * - `offline`: the browser says it has no network (it retries as soon as it is back);
 * - `refused`: the server refused the token (close code 4403): retrying cannot help.
 */

export type ConnectionState = "connecting" | "live" | "reconnecting" | "offline" | "refused";

export interface ConnectionFacts {
  /** The socket is open and the server acknowledged it. */
  readonly open: boolean;
  /** It has been open at least once. */
  readonly wasOpen: boolean;
  /** `navigator.onLine`. */
  readonly online: boolean;
  /** The server refused the token. */
  readonly refused: boolean;
}

export function connectionState(facts: ConnectionFacts): ConnectionState {
  if (facts.refused) return "refused";
  if (!facts.online) return "offline";
  if (facts.open) return "live";
  return facts.wasOpen ? "reconnecting" : "connecting";
}

export const LABELS: Record<ConnectionState, string> = {
  connecting: "connecting…",
  live: "live",
  reconnecting: "reconnecting…",
  offline: "offline",
  refused: "not authorised",
};

/** The wait before reconnect attempt `retries` (0, 1, …): 0.3 s doubling to 10 s, jittered. */
export function retryDelay(retries: number, random: () => number = Math.random): number {
  return Math.min(300 * 2 ** retries, 10_000) + random() * 300;
}

/**
 * Waits that end early when the page has a reason to try at once: the network is back, the page
 * is shown again (after sleep), the user asked.
 */
export class Waker {
  private readonly waiting = new Set<() => void>();

  // Arrow functions, not `setTimeout` itself: called as a method, a browser's setTimeout
  // throws "Illegal invocation".
  constructor(
    private readonly setTimer: (run: () => void, ms: number) => unknown = (run, ms) =>
      setTimeout(run, ms),
    private readonly clearTimer: (timer: unknown) => void = (t) =>
      clearTimeout(t as ReturnType<typeof setTimeout>),
  ) {}

  /** Resolves after `ms`, or at the next `wake()`, whichever is first. */
  wait(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const done = () => {
        this.clearTimer(timer);
        this.waiting.delete(done);
        resolve();
      };
      const timer = this.setTimer(done, ms);
      this.waiting.add(done);
    });
  }

  /** End every wait now; answers how many there were. */
  wake(): number {
    const now = [...this.waiting];
    for (const done of now) done();
    return now.length;
  }
}

/**
 * Whether an open socket has been silent too long to trust: after sleep, a socket can look open
 * though its peer is long gone. `keepAlive` is the ping interval (the server answers every ping).
 */
export function seemsDead(lastHeard: number, now: number, keepAlive: number): boolean {
  return now - lastHeard > keepAlive + PONG_TIMEOUT;
}

/** How long a ping may wait for its pong before the socket is given up. */
export const PONG_TIMEOUT = 5_000;
