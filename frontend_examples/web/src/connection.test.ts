import { describe, expect, it, vi } from "vitest";
import { connectionState, retryDelay, seemsDead, Waker, PONG_TIMEOUT } from "./connection";

const base = { open: false, wasOpen: false, online: true, refused: false };

describe("connectionState (U2: the connection's real state)", () => {
  it("is connecting until the first open, then live", () => {
    expect(connectionState(base)).toBe("connecting");
    expect(connectionState({ ...base, open: true, wasOpen: true })).toBe("live");
  });

  it("is reconnecting once an open socket was lost", () => {
    expect(connectionState({ ...base, wasOpen: true })).toBe("reconnecting");
  });

  it("is offline while the browser has no network, whatever the socket says", () => {
    expect(connectionState({ ...base, online: false })).toBe("offline");
    expect(connectionState({ ...base, open: true, wasOpen: true, online: false })).toBe(
      "offline",
    );
  });

  it("is refused for good after a refused token", () => {
    expect(connectionState({ ...base, wasOpen: true, refused: true })).toBe("refused");
    expect(connectionState({ ...base, online: false, refused: true })).toBe("refused");
  });
});

describe("retryDelay", () => {
  it("doubles from 0.3 s up to 10 s, plus up to 0.3 s of jitter", () => {
    expect(retryDelay(0, () => 0)).toBe(300);
    expect(retryDelay(1, () => 0)).toBe(600);
    expect(retryDelay(10, () => 0)).toBe(10_000);
    expect(retryDelay(0, () => 0.999)).toBeLessThan(600);
  });
});

describe("Waker (recovering after sleep or a dropped network)", () => {
  it("ends a wait at its time", async () => {
    vi.useFakeTimers();
    try {
      const waker = new Waker();
      let done = false;
      void waker.wait(1_000).then(() => (done = true));
      await vi.advanceTimersByTimeAsync(999);
      expect(done).toBe(false);
      await vi.advanceTimersByTimeAsync(1);
      expect(done).toBe(true);
    } finally {
      vi.useRealTimers();
    }
  });

  it("calls the timer functions unbound (a browser's setTimeout throws when bound)", async () => {
    const real = globalThis.setTimeout;
    vi.stubGlobal("setTimeout", function (this: unknown, run: () => void, ms: number) {
      if (this !== undefined && this !== globalThis) throw new TypeError("Illegal invocation");
      return real(run, ms);
    });
    try {
      await new Waker().wait(1);
    } finally {
      vi.unstubAllGlobals();
    }
  });

  it("ends every wait at once when woken, and only those", async () => {
    vi.useFakeTimers();
    try {
      const waker = new Waker();
      const ended: number[] = [];
      void waker.wait(10_000).then(() => ended.push(1));
      void waker.wait(5_000).then(() => ended.push(2));
      expect(waker.wake()).toBe(2);
      await vi.advanceTimersByTimeAsync(0);
      expect(ended.sort()).toEqual([1, 2]);
      expect(waker.wake()).toBe(0);
      expect(vi.getTimerCount()).toBe(0); // the woken waits' timers are cleared
    } finally {
      vi.useRealTimers();
    }
  });
});

describe("seemsDead", () => {
  it("trusts a socket heard from within a ping and its pong timeout", () => {
    expect(seemsDead(0, 10_000 + PONG_TIMEOUT, 10_000)).toBe(false);
    expect(seemsDead(0, 10_001 + PONG_TIMEOUT, 10_000)).toBe(true);
  });
});
