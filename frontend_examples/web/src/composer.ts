/**
 * The composer's sends (SPEC Q15, Q16): Send (sendMessage), Steer (sendMessage with
 * `delivery: STEER`, offered only where the session's agent takes steering: `agents { steering }`)
 * and Add to queue (enqueueMessage). Each send carries a `clientMessageId` made here and shows at
 * once as an optimistic row — a pending turn in the conversation (`#pending-turns`), or a pending
 * entry under the queue (`#pending-entries`) — that the server's turn or entry with the same key
 * replaces (src/sends.ts). What the server did is shown under the composer (`#send-outcome`).
 *
 * A send lost on the network stays as a failed row with Retry (the same key: the server answers
 * what the first request did, if it got it) and Discard. A retry also reads the session's
 * snapshot again: the socket may have missed what happened while the network was away.
 */
import { type Api, type MutationResult, type SendOutcome } from "./api";
import { $, button, el } from "./dom";
import type { SessionView } from "./session";
import { keysOf, Outbox, type Delivery, type Send } from "./sends";

export interface ComposerHooks {
  /** The open session, if any. */
  view(): SessionView | null;
  showError(message: string | null): void;
}

const OUTCOME_TEXT: Record<SendOutcome, string> = {
  STARTED: "Started a turn.",
  QUEUED: "Queued: it runs when the agent is free.",
  STEERED: "Steered into the running turn.",
};

const PENDING_TEXT: Record<Send["state"], string> = {
  sending: "sending…",
  failed: "not sent",
  answered: "sent",
};

export class Composer {
  readonly outbox = new Outbox();
  /** Profile name → whether its agent takes steered messages (`agents { steering }`). */
  private steering = new Map<string, boolean>();

  constructor(
    private readonly api: Api,
    private readonly hooks: ComposerHooks,
  ) {}

  setAgents(agents: readonly { name: string; steering: boolean }[]): void {
    this.steering = new Map(agents.map((a) => [a.name, a.steering]));
    this.renderSteer();
  }

  /** Send what the composer holds (cleared at once; put back when the server refuses it). */
  send(delivery: Delivery): void {
    const view = this.hooks.view();
    const input = $<HTMLTextAreaElement>("message");
    const content = input.value;
    if (!view || content.trim() === "") return;
    input.value = "";
    const send = this.outbox.add(view.id, content, delivery);
    this.render();
    void this.deliver(send);
  }

  retry(key: string): void {
    const send = this.outbox.retry(key);
    if (!send) return;
    this.render();
    void this.deliver(send);
  }

  discard(key: string): void {
    this.outbox.forget(key);
    this.render();
  }

  private async deliver(send: Send): Promise<void> {
    const { sessionId, content, key: clientMessageId } = send;
    let result: MutationResult;
    let outcome: SendOutcome | null;
    try {
      if (send.delivery === "QUEUE") {
        result = await this.api.mutate("enqueueMessage", { sessionId, content, clientMessageId });
        outcome = "QUEUED"; // or started at once (`dispatched`): its turn carries the key
      } else {
        const sent = await this.api.mutate("sendMessage", {
          sessionId,
          content,
          clientMessageId,
          delivery: send.delivery,
        });
        result = sent;
        outcome = sent.outcome;
      }
    } catch (e) {
      // Lost on the network (or a fault): the server may or may not have it. Keep the key.
      const message = e instanceof Error ? e.message : String(e);
      this.outbox.failed(send.key, message);
      this.hooks.showError(`not sent: ${message}`);
      this.render();
      return;
    }
    const view = this.hooks.view();
    if (result.userErrors.length > 0) {
      this.outbox.forget(send.key); // refused: nothing was made
      const input = $<HTMLTextAreaElement>("message");
      if (input.value === "" && view?.id === sessionId) input.value = content;
      this.hooks.showError(result.userErrors.map((e) => `${e.code}: ${e.message}`).join("; "));
    } else {
      this.outbox.answered(send.key, outcome);
      this.hooks.showError(null);
      if (view?.id === sessionId) this.showOutcome(outcome, send);
      if (send.retried && view?.id === sessionId) void view.loadSnapshot();
    }
    // The answer's queue is the newest the page may have (it may hold this send's entry).
    if (view?.id === sessionId) view.offerQueue(result.queue);
    this.render();
  }

  private showOutcome(outcome: SendOutcome | null, send: Send): void {
    const shown = $("send-outcome");
    shown.dataset.outcome = outcome ?? "";
    shown.dataset.clientMessageId = send.key;
    shown.textContent = outcome === null ? "" : OUTCOME_TEXT[outcome];
  }

  /**
   * Drop the sends whose row the server shows now (matched by key), then draw what is left.
   * Called whenever the session or its queue is redrawn, and when a send changes.
   */
  render(): void {
    const view = this.hooks.view();
    const session = view?.session;
    const queue = view?.queue;
    if (!view) return;
    if (session || queue) {
      const turns = session ? [...session.turnsConnection.edges.map((e) => e.node)] : [];
      if (session?.currentTurn) turns.push(session.currentTurn);
      this.outbox.settle(view.id, keysOf({ turns, entries: queue?.entries ?? [] }));
    }
    const sends = this.outbox.of(view.id);
    const toTurns = sends.filter((s) => s.delivery !== "QUEUE");
    const toQueue = sends.filter((s) => s.delivery === "QUEUE");
    $("pending-turns").replaceChildren(...toTurns.map((s) => this.pendingTurn(s)));
    $("pending-entries").replaceChildren(...toQueue.map((s) => this.pendingEntry(s)));
    if (toTurns.length > 0) $("conversation-empty").hidden = true;
    if (toQueue.length > 0) $("queue-empty").hidden = true;
    this.renderSteer();
  }

  /** Steer shows only where the session's agent takes steered messages; it offers the message
   * to a running turn (with none running, the server starts or queues it like Send). */
  renderSteer(): void {
    const session = this.hooks.view()?.session;
    const steer = $<HTMLButtonElement>("steer");
    steer.hidden = session === undefined || this.steering.get(session.agent) !== true;
    steer.disabled = session?.currentTurn?.status !== "RUNNING";
  }

  private tools(send: Send): HTMLElement[] {
    if (send.state !== "failed") return [];
    return [
      button("Retry", () => this.retry(send.key), "Retry"),
      button("Discard", () => this.discard(send.key), "Discard"),
    ];
  }

  private status(send: Send): string {
    if (send.state === "sending" && send.delivery === "STEER") return "steering…";
    if (send.state === "answered" && send.outcome) return send.outcome.toLowerCase();
    if (send.state === "failed" && send.error) return `not sent: ${send.error}`;
    return PENDING_TEXT[send.state];
  }

  private pendingTurn(send: Send): HTMLLIElement {
    const foot = el(
      "div",
      { className: "turn-foot" },
      el("span", { className: "turn-status", textContent: this.status(send) }),
      ...this.tools(send),
    );
    const li = el(
      "li",
      { className: "turn pending" },
      el("div", { className: "bubble user" }, send.content),
      el("div", { className: "reply" }, foot),
    );
    this.mark(li, send);
    return li;
  }

  private pendingEntry(send: Send): HTMLLIElement {
    const li = el(
      "li",
      { className: "entry pending" },
      el("span", { className: "handle", textContent: "·" }),
      el("span", { className: "position", textContent: "" }),
      el("span", { className: "content", textContent: send.content }),
      el(
        "span",
        { className: "tools" },
        el("span", { className: "pending-status", textContent: this.status(send) }),
        ...this.tools(send),
      ),
    );
    this.mark(li, send);
    return li;
  }

  private mark(li: HTMLLIElement, send: Send): void {
    li.dataset.clientMessageId = send.key;
    li.dataset.sendState = send.state;
    li.dataset.delivery = send.delivery;
  }
}
