/**
 * Following one session (SPEC R3, O2, O4): its subscriptions, its snapshot, and its turns'
 * output and items. The backend owns auto-run, cancellation progress and the order of changes;
 * this only merges what it hears by revision:
 *
 * 1. subscribe (queue, cancellation, session), then read the snapshot query;
 * 2. keep per session and kind the highest revision seen; drop anything older (RevisionBook);
 * 3. on every (re)connect read the snapshot again (graphql-ws re-subscribes, with no cursor).
 *
 * A turn's output and items have a cursor of their own: each turn's text and items are kept with
 * their offsets in sessionStorage and, on every connect and after a reload, `turnOutput` and
 * `turnItems` resume from those offsets (src/transcript.ts, src/items.ts). Closing or reloading
 * the page never stops a turn; only Cancel does.
 */
import {
  SESSION_SNAPSHOT,
  SUBSCRIPTIONS,
  type Api,
  type CancellationStatus,
  type QueueStatus,
  type SessionCore,
  type SessionSnapshot,
  type TurnItem,
  type TurnStreamVariables,
} from "./api";
import type { TurnContent } from "./conversation";
import type { TypedDocumentString } from "./gql/graphql";
import { applyItems, type ItemsChunk, type TurnItems } from "./items";
import { RevisionBook, type OptimisticCancel } from "./revisions";
import {
  resumeFrom,
  transcripts,
  TurnStore,
  type OutputChunk,
  type Resumable,
  type TurnOutput,
} from "./transcript";

export type Kinds = { session: SessionCore; queue: QueueStatus; cancellation: CancellationStatus };

/** What the page redraws when something newer arrived. */
export interface SessionEvents {
  session(): void;
  queue(): void;
  cancellation(): void;
  output(): void;
  items(): void;
  snapshot(): void;
  error(message: string): void;
}

type Formatted = { message: string; extensions?: { code?: string } };

export class SessionView implements TurnContent {
  readonly outputs: TurnStore<TurnOutput, OutputChunk>;
  readonly turnItems: TurnStore<TurnItems<TurnItem>, ItemsChunk<TurnItem>>;
  /** The Cancel click not yet answered by a newer cancellation revision (SPEC §7). */
  optimisticCancel: OptimisticCancel | null = null;
  private active = true;
  private subscriptions: (() => void)[] = [];
  private streams: (() => void)[] = [];
  private saveTimer: ReturnType<typeof setTimeout> | undefined;

  constructor(
    readonly id: string,
    private readonly api: Api,
    private readonly book: RevisionBook<Kinds>,
    private readonly events: SessionEvents,
  ) {
    this.outputs = transcripts(window.sessionStorage, id);
    this.turnItems = new TurnStore(window.sessionStorage, `turnqueue.items.${id}`, applyItems);
  }

  get session(): SessionCore | undefined {
    return this.book.get(this.id, "session");
  }

  get queue(): QueueStatus | undefined {
    return this.book.get(this.id, "queue");
  }

  get cancellation(): CancellationStatus | undefined {
    return this.book.get(this.id, "cancellation");
  }

  text(turnId: string): string | undefined {
    return this.outputs.get(turnId)?.text;
  }

  items(turnId: string): readonly TurnItem[] | undefined {
    return this.turnItems.get(turnId)?.items;
  }

  /** Subscribe; when the socket is already up, also follow the turns and read the snapshot. */
  start(connected: boolean): void {
    this.follow(SUBSCRIPTIONS.queue, (d) => this.offerQueue(d.queueStatusChanged));
    this.follow(SUBSCRIPTIONS.cancellation, (d) => this.offerCancellation(d.cancellationChanged));
    this.follow(SUBSCRIPTIONS.session, (d) => this.offerSession(d.sessionChanged));
    if (connected) this.connected();
  }

  /** On every connect: the turns from the offsets held, then (after graphql-ws has sent the
   * re-subscriptions, this tick) the snapshot. */
  connected(): void {
    this.followTurns();
    setTimeout(() => void this.loadSnapshot());
  }

  /** On every disconnect: graphql-ws would resubscribe the turns with old offsets; stop them. */
  closed(): void {
    this.stopTurns();
  }

  dispose(): void {
    this.active = false;
    this.stopTurns();
    for (const stop of this.subscriptions) stop();
    this.subscriptions = [];
    this.save();
    this.book.forget(this.id);
  }

  save(): void {
    this.outputs.save();
    this.turnItems.save();
  }

  // ---- merging (R3) ------------------------------------------------------------------------
  offerQueue(queue: QueueStatus | null | undefined): void {
    if (this.active && queue && this.book.offer(queue.sessionId, "queue", queue)) {
      if (queue.sessionId === this.id) this.events.queue();
    }
  }

  offerCancellation(status: CancellationStatus | null | undefined): void {
    if (this.active && status && this.book.offer(status.sessionId, "cancellation", status)) {
      if (status.sessionId === this.id) this.events.cancellation();
    }
  }

  offerSession(session: SessionCore & Partial<SessionSnapshot>): void {
    if (!this.active) return;
    const { queue, cancellation, ...core } = session;
    if (this.book.offer(core.id, "session", core)) this.events.session();
    this.offerQueue(queue);
    this.offerCancellation(cancellation);
  }

  async loadSnapshot(): Promise<void> {
    try {
      const data = await this.api.query(SESSION_SNAPSHOT, { id: this.id });
      if (!this.active) return;
      if (data.session === null) this.events.error(`session ${this.id} not found`);
      else this.offerSession(data.session);
      this.events.snapshot();
    } catch (e) {
      if (this.active) this.events.error(`snapshot: ${String(e)}`);
    }
  }

  /** One subscription; a stream the server ended (RESYNC, R3) is resubscribed with a snapshot. */
  private follow<T>(
    document: TypedDocumentString<T, { sessionId: string }>,
    onData: (data: T) => void,
  ): void {
    const stop = this.api.ws.subscribe<T>(
      { query: document.toString(), variables: { sessionId: this.id } },
      {
        next: (result) => {
          if (result.data) onData(result.data);
        },
        error: (err) => {
          if (!this.active) return;
          const errors = Array.isArray(err) ? (err as Formatted[]) : [];
          this.events.error(errors.map((e) => e.message).join("; ") || "subscription failed");
          if (errors.length > 0 && errors.every((e) => e.extensions?.code !== "NOT_FOUND")) {
            this.follow(document, onData);
            void this.loadSnapshot();
          }
        },
        complete: () => {},
      },
    );
    this.subscriptions.push(stop);
  }

  // ---- a turn's output and items: resumed from the offsets held (O2, O4) --------------------
  private followTurns(): void {
    this.stopTurns();
    this.streams = [
      this.followTurn(SUBSCRIPTIONS.output, (d) => d.turnOutput, this.outputs, () =>
        this.events.output(),
      ),
      this.followTurn(SUBSCRIPTIONS.items, (d) => d.turnItems, this.turnItems, () =>
        this.events.items(),
      ),
    ];
  }

  private stopTurns(): void {
    for (const stop of this.streams) stop();
    this.streams = [];
  }

  /** Save what is held at most every 200 ms (and when the page goes away). */
  private saveSoon(): void {
    this.saveTimer ??= setTimeout(() => {
      this.saveTimer = undefined;
      this.save();
    }, 200);
  }

  /**
   * Follow one turn stream from where `store` is: the newest turn's id and offset while it
   * runs, else the current turn and the later ones. Answers how to stop.
   */
  private followTurn<D, C extends { turnId: string }, T extends Resumable>(
    document: TypedDocumentString<D, TurnStreamVariables>,
    pick: (data: D) => C,
    store: TurnStore<T, C>,
    render: () => void,
  ): () => void {
    let stop = () => {};
    const start = () => {
      const variables: TurnStreamVariables = resumeFrom(this.id, store.newest());
      let live = true;
      const restart = () => {
        stop();
        start();
      };
      const dispose = this.api.ws.subscribe<D>(
        { query: document.toString(), variables },
        {
          next: (result) => {
            if (live && result.data && store.offer(pick(result.data))) {
              this.saveSoon();
              render();
            }
          },
          error: (err) => {
            if (!live) return;
            const errors = Array.isArray(err) ? (err as Formatted[]) : [];
            this.events.error(errors.map((e) => e.message).join("; ") || "turn stream failed");
            if (errors.some((e) => e.extensions?.code === "RESYNC")) restart();
          },
          // A stream of one turn (`turnId`) ends after its `done`: follow the next turns.
          complete: () => {
            if (live && variables.turnId !== undefined) restart();
          },
        },
      );
      stop = () => {
        live = false;
        dispose();
      };
    };
    start();
    return () => stop();
  }
}
