/**
 * turnqueue's example page (SPEC U2): tasks, one session with live turn output and Cancel, and
 * its queue panel. The backend owns auto-run, cancellation progress and the order of changes;
 * the page only merges what it hears by revision (R3):
 *
 * 1. subscribe (queue, cancellation, session, output), then read the snapshot query;
 * 2. keep per session and kind the highest revision seen; drop anything older;
 * 3. on every (re)connect read the snapshot again (graphql-ws re-subscribes, with no cursor).
 *
 * A turn's output and items have a cursor of their own (O2, O4): the page keeps each turn's
 * text and items with their offsets in sessionStorage and, on every (re)connect and after a
 * reload, subscribes to `turnOutput` and `turnItems` from those offsets (src/transcript.ts,
 * src/items.ts). Closing or reloading the page never stops a turn; only Cancel does.
 */
import {
  createApi,
  GraphQLRequestError,
  SESSION_SNAPSHOT,
  SUBSCRIPTIONS,
  TASKS,
  type Approval,
  type CancellationStatus,
  type MutationInput,
  type MutationName,
  type MutationResult,
  type QueueEntry,
  type QueueStatus,
  type SessionCore,
  type SessionSnapshot,
  type TurnItem,
  type TurnStreamVariables,
} from "./api";
import type { TypedDocumentString } from "./gql/graphql";
import { cancellationShown, RevisionBook, type OptimisticCancel } from "./revisions";
import { applyItems, type ItemsChunk, type TurnItems } from "./items";
import { resumeFrom, transcripts, TurnStore, type Resumable } from "./transcript";

type Kinds = { session: SessionCore; queue: QueueStatus; cancellation: CancellationStatus };

const params = new URLSearchParams(location.search);
const sessionId = params.get("session");

const book = new RevisionBook<Kinds>();
let optimisticCancel: OptimisticCancel | null = null;
let editing: { entryId: string; draft: string } | null = null;
let connected = false;
/** Snapshots merged so far, in `<body data-snapshots>`: tests wait on it instead of sleeping. */
let snapshotsMerged = 0;

function $<T extends HTMLElement = HTMLElement>(id: string): T {
  const element = document.getElementById(id);
  if (element === null) throw new Error(`#${id} is missing`);
  return element as T;
}

function el<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  props: Partial<HTMLElementTagNameMap[K]> = {},
  ...children: (Node | string)[]
): HTMLElementTagNameMap[K] {
  const element = Object.assign(document.createElement(tag), props);
  element.append(...children);
  return element;
}

function showError(message: string | null): void {
  $("errors").textContent = message ?? "";
}

const api = createApi(params.get("token"), {
  connected() {
    connected = true;
    setConnection("connected", "live");
    if (sessionId !== null) followTurns(sessionId); // from the offsets the page has (O2)
    // After this tick: graphql-ws sends the (re-)subscriptions first, then we read the snapshot.
    setTimeout(() => {
      void loadTasks();
      if (sessionId !== null) void loadSnapshot(sessionId);
    });
  },
  closed(fatal) {
    connected = false;
    stopTurns();
    setConnection("closed", fatal ?? "reconnecting…");
  },
});

function setConnection(state: string, text: string): void {
  const conn = $("conn");
  conn.dataset.state = state;
  conn.textContent = text;
}

// ---- merging (R3) ----------------------------------------------------------------------------

function offerQueue(queue: QueueStatus | null | undefined): void {
  if (queue && book.offer(queue.sessionId, "queue", queue)) renderQueue();
}

function offerCancellation(status: CancellationStatus | null | undefined): void {
  if (status && book.offer(status.sessionId, "cancellation", status)) renderCancellation();
}

function offerSession(session: SessionCore & Partial<SessionSnapshot>): void {
  const { queue, cancellation, ...core } = session;
  if (book.offer(core.id, "session", core)) {
    renderSession();
  }
  offerQueue(queue);
  offerCancellation(cancellation);
}

// ---- a turn's output and items: resumed from the offsets the page holds (O2, O4) ------------

/** The session's turn outputs and items, kept in sessionStorage: a reload resumes them. */
const outputs = transcripts(window.sessionStorage, sessionId ?? "");
const items = new TurnStore<TurnItems<TurnItem>, ItemsChunk<TurnItem>>(
  window.sessionStorage,
  `turnqueue.items.${sessionId ?? ""}`,
  applyItems,
);
let stopStreams: (() => void)[] = [];
let saveTimer: ReturnType<typeof setTimeout> | undefined;

/** Save what the page holds at most every 200 ms (and when the page goes away). */
function saveSoon(): void {
  saveTimer ??= setTimeout(() => {
    saveTimer = undefined;
    outputs.save();
    items.save();
  }, 200);
}
window.addEventListener("pagehide", () => {
  outputs.save();
  items.save();
});

/** On every connect: follow the output and the items from where the page is. */
function followTurns(id: string): void {
  stopTurns();
  stopStreams = [
    followTurn(id, SUBSCRIPTIONS.output, (d) => d.turnOutput, outputs, renderOutput),
    followTurn(id, SUBSCRIPTIONS.items, (d) => d.turnItems, items, renderItems),
  ];
}

/** On every disconnect: graphql-ws would resubscribe with the old offsets, so stop instead. */
function stopTurns(): void {
  for (const stop of stopStreams) stop();
  stopStreams = [];
}

/**
 * Follow one turn stream (`turnOutput` or `turnItems`) from where `store` is: the newest turn's
 * id and offset while it runs, else the current turn and the later ones. Answers how to stop.
 */
function followTurn<D, C extends { turnId: string }, T extends Resumable>(
  id: string,
  document: TypedDocumentString<D, TurnStreamVariables>,
  pick: (data: D) => C,
  store: TurnStore<T, C>,
  render: () => void,
): () => void {
  let stop = () => {};
  const start = () => {
    const variables: TurnStreamVariables = resumeFrom(id, store.newest());
    let active = true;
    const restart = () => {
      stop();
      start();
    };
    const dispose = api.ws.subscribe<D>(
      { query: document.toString(), variables },
      {
        next: (result) => {
          if (active && result.data && store.offer(pick(result.data))) {
            saveSoon();
            render();
          }
        },
        error: (err) => {
          if (!active) return;
          type Formatted = { message: string; extensions?: { code?: string } };
          const errors = Array.isArray(err) ? (err as Formatted[]) : [];
          showError(errors.map((e) => e.message).join("; ") || "turn stream failed");
          if (errors.some((e) => e.extensions?.code === "RESYNC")) restart();
        },
        // A stream of one turn (`turnId`) ends after its `done`: follow the next turns.
        complete: () => {
          if (active && variables.turnId !== undefined) restart();
        },
      },
    );
    stop = () => {
      active = false;
      dispose();
    };
  };
  start();
  return () => stop();
}

async function loadSnapshot(id: string): Promise<void> {
  try {
    const data = await api.query(SESSION_SNAPSHOT, { id });
    if (data.session === null) showError(`session ${id} not found`);
    else offerSession(data.session);
    document.body.dataset.snapshots = String(++snapshotsMerged);
  } catch (e) {
    showError(`snapshot: ${String(e)}`);
  }
}

/** One subscription; a stream the server ended (RESYNC, R3) is resubscribed with a snapshot. */
function follow<T>(
  id: string,
  document: TypedDocumentString<T, { sessionId: string }>,
  onData: (data: T) => void,
): void {
  api.ws.subscribe<T>(
    { query: document.toString(), variables: { sessionId: id } },
    {
      next: (result) => {
        if (result.data) onData(result.data);
      },
      error: (err) => {
        type Formatted = { message: string; extensions?: { code?: string } };
        const errors = Array.isArray(err) ? (err as Formatted[]) : [];
        showError(errors.map((e) => e.message).join("; ") || "subscription failed");
        if (errors.length > 0 && errors.every((e) => e.extensions?.code !== "NOT_FOUND")) {
          follow(id, document, onData);
          if (connected) void loadSnapshot(id);
        }
      },
      complete: () => {},
    },
  );
}

function openSession(id: string): void {
  $("session-panel").hidden = false;
  $("queue-panel").hidden = false;
  follow(id, SUBSCRIPTIONS.queue, (d) => offerQueue(d.queueStatusChanged));
  follow(id, SUBSCRIPTIONS.cancellation, (d) => offerCancellation(d.cancellationChanged));
  follow(id, SUBSCRIPTIONS.session, (d) => offerSession(d.sessionChanged));
  // The output and the snapshot follow once the socket is up (the `connected` handler).
}

// ---- actions ----------------------------------------------------------------------------------

async function mutate<K extends MutationName>(
  name: K,
  input: MutationInput<K>,
): Promise<MutationResult | null> {
  try {
    const result = await api.mutate(name, input);
    offerQueue(result.queue);
    offerCancellation(result.cancellation);
    showError(result.userErrors.map((e) => `${e.code}: ${e.message}`).join("; ") || null);
    return result;
  } catch (e) {
    showError(e instanceof GraphQLRequestError ? e.message : `${name}: ${String(e)}`);
    return null;
  }
}

async function loadTasks(): Promise<void> {
  try {
    const data = await api.query(TASKS, {});
    $("tasks").replaceChildren(
      ...data.tasks.map((task) => {
        const link = el("a", { textContent: task.title });
        if (task.currentSession) link.href = sessionHref(task.currentSession.id);
        const state = task.currentSession ? ` · ${task.currentSession.state}` : "";
        return el("li", { className: "task" }, link, el("small", { textContent: state }));
      }),
    );
  } catch (e) {
    showError(`tasks: ${String(e)}`);
  }
}

function sessionHref(id: string): string {
  const next = new URLSearchParams(params);
  next.set("session", id);
  return `?${next.toString()}`;
}

$<HTMLFormElement>("new-task").addEventListener("submit", (event) => {
  event.preventDefault();
  const title = $<HTMLInputElement>("new-task-title").value.trim();
  void mutate("createTask", { title }).then((result) => {
    if (result?.session) location.assign(sessionHref(result.session.id));
  });
});

function compose(name: "sendMessage" | "enqueueMessage"): void {
  const input = $<HTMLInputElement>("message");
  const content = input.value;
  if (sessionId === null || content.trim() === "") return;
  input.value = ""; // cleared at once, so the next message can be typed; put back on failure
  void mutate(name, { sessionId, content }).then((result) => {
    if ((!result || result.userErrors.length > 0) && input.value === "") input.value = content;
  });
}

$<HTMLFormElement>("compose").addEventListener("submit", (event) => {
  event.preventDefault();
  compose("sendMessage");
});
$("enqueue").addEventListener("click", () => compose("enqueueMessage"));

$("cancel").addEventListener("click", () => {
  if (sessionId === null) return;
  // Optimistic pending from the click until the backend's first newer value (SPEC §7).
  const clicked = { clickedAt: book.get(sessionId, "cancellation")?.revision ?? 0 };
  optimisticCancel = clicked;
  renderCancellation();
  void mutate("cancel", { sessionId }).finally(() => {
    if (optimisticCancel === clicked) optimisticCancel = null;
    renderCancellation();
  });
});

$<HTMLInputElement>("auto-run").addEventListener("change", (event) => {
  if (sessionId === null) return;
  const autoRun = (event.target as HTMLInputElement).checked;
  // The switch shows the backend's value: put it back until the answer arrives.
  renderQueue();
  void mutate("setAutoRun", { sessionId, autoRun });
});

function queueAction(entry: QueueEntry, action: string, queue: QueueStatus): void {
  const sessionId = queue.sessionId;
  const ids = queue.entries.map((e) => e.id);
  const index = ids.indexOf(entry.id);
  switch (action) {
    case "send-now":
      void mutate("sendNow", { sessionId, scope: "ENTRY", entryId: entry.id });
      return;
    case "remove":
      void mutate("removeQueueEntry", { sessionId, entryId: entry.id });
      return;
    case "edit":
      editing = { entryId: entry.id, draft: entry.content };
      renderQueue();
      return;
    case "save":
      if (editing) {
        void mutate("updateQueueEntry", { sessionId, entryId: entry.id, content: editing.draft });
      }
      editing = null;
      renderQueue();
      return;
    case "up":
    case "down": {
      const other = index + (action === "up" ? -1 : 1);
      if (other < 0 || other >= ids.length) return;
      [ids[index], ids[other]] = [ids[other] as string, entry.id];
      void mutate("reorderQueue", { sessionId, orderedIds: ids, expectedRevision: queue.revision });
      return;
    }
  }
}

// ---- rendering --------------------------------------------------------------------------------

function renderSession(): void {
  if (sessionId === null) return;
  const session = book.get(sessionId, "session");
  if (session === undefined) return;
  $("session-title").textContent = session.task.title;
  $("session-state").textContent = session.state;
  $("session-revision").textContent = String(session.revision);
  const clarification = $("clarification");
  clarification.hidden = session.clarification === null;
  const question = session.clarification?.question;
  clarification.textContent = question ? `Agent asks: ${question}` : "";
  renderApproval(session.pendingApproval);
  const turn = session.currentTurn;
  $("turn-status").textContent = turn ? `· ${turn.prompt} · ${turn.status}` : "(none yet)";
  renderOutput();
  renderItems();
  $("turns").replaceChildren(
    ...session.turns.map((t) => {
      const li = el("li", { className: "turn" }, `${t.prompt} · ${t.status}`);
      if (t.error) li.append(` (${t.error})`);
      li.dataset.status = t.status;
      return li;
    }),
  );
}

/** The current turn's streamed text; a turn the page never streamed shows the snapshot's. */
function renderOutput(): void {
  const turn = sessionId === null ? null : book.get(sessionId, "session")?.currentTurn;
  if (!turn) return;
  const output = $("output");
  output.textContent = outputs.get(turn.id)?.text ?? turn.output;
  output.dataset.turnId = turn.id;
}

/** A3: the current turn's thoughts, tool calls (title, status) and plans, as they stream. */
function renderItems(): void {
  const turn = sessionId === null ? null : book.get(sessionId, "session")?.currentTurn;
  const shown = (turn ? items.get(turn.id)?.items : undefined) ?? [];
  $("items").replaceChildren(
    ...shown.flatMap((item) => {
      const li = el("li", { className: item.__typename });
      switch (item.__typename) {
        case "MessageItem": // the transcript above shows it
          return [];
        case "ThoughtItem":
          li.append(el("i", { textContent: item.text }));
          break;
        case "ToolCallItem":
          li.append(`${item.title} `, el("b", { className: "status", textContent: item.status }));
          li.dataset.status = item.status;
          break;
        case "PlanItem":
          li.append(
            "Plan",
            el(
              "ul",
              {},
              ...item.entries.map((e) => el("li", { textContent: `${e.content} · ${e.status}` })),
            ),
          );
          break;
        case "RawItem":
          li.append(el("code", { textContent: item.json }));
          break;
      }
      return [li];
    }),
  );
}

/** A6: the agent's permission request, its options as buttons that answer it. */
function renderApproval(approval: Approval | null): void {
  const box = $("approval");
  box.hidden = approval === null;
  box.dataset.approvalId = approval?.id ?? "";
  if (approval === null) return box.replaceChildren();
  const buttons = approval.options.map((option) => {
    const button = el("button", { type: "button", textContent: option.name });
    button.dataset.kind = option.kind;
    button.addEventListener("click", () => {
      for (const b of buttons) b.disabled = true; // once; the next session revision redraws
      void mutate("answerApproval", { approvalId: approval.id, optionId: option.id });
    });
    return button;
  });
  box.replaceChildren(el("span", { textContent: `Agent asks: ${approval.title} ` }), ...buttons);
}

function renderCancellation(): void {
  if (sessionId === null) return;
  const backend = book.get(sessionId, "cancellation");
  const shown = cancellationShown(backend, optimisticCancel);
  const state = $("cancel-state");
  state.dataset.pending = String(shown.pending);
  const label = shown.optimistic ? "cancelling… (sent)" : "cancelling…";
  state.textContent = shown.pending ? label : "";
  $<HTMLButtonElement>("cancel").disabled = shown.pending;
  $("cancellation-revision").textContent = backend ? String(backend.revision) : "";
}

function renderQueue(): void {
  if (sessionId === null) return;
  const queue = book.get(sessionId, "queue");
  if (queue === undefined) return;
  $<HTMLInputElement>("auto-run").checked = queue.autoRun;
  $("pause-reason").textContent = queue.autoRun ? "" : `paused: ${queue.pauseReason ?? "?"}`;
  $("held-by").textContent = queue.heldBy.length ? `held by: ${queue.heldBy.join(", ")}` : "";
  $("queue-revision").textContent = String(queue.revision);
  if (editing && !queue.entries.some((e) => e.id === editing?.entryId)) editing = null;
  $("queue").replaceChildren(...queue.entries.map((entry) => queueRow(entry, queue)));
}

function queueRow(entry: QueueEntry, queue: QueueStatus): HTMLLIElement {
  const button = (label: string, action: string, title = label) => {
    const b = el("button", { type: "button", textContent: label, title });
    b.setAttribute("aria-label", title);
    b.addEventListener("click", () => queueAction(entry, action, queue));
    return b;
  };
  let content: HTMLElement;
  if (editing?.entryId === entry.id) {
    const input = el("input", { className: "content", value: editing.draft });
    input.addEventListener("input", () => {
      if (editing) editing.draft = input.value;
    });
    content = input;
  } else {
    content = el("span", { className: "content", textContent: entry.content });
  }
  const row = el(
    "li",
    { className: "entry" },
    content,
    button("Send Now", "send-now"),
    editing?.entryId === entry.id ? button("Save", "save") : button("Edit", "edit"),
    button("Remove", "remove"),
    button("↑", "up", "Move up"),
    button("↓", "down", "Move down"),
  );
  row.dataset.entryId = entry.id;
  return row;
}

void loadTasks(); // over HTTP: the list does not wait for the socket
if (sessionId !== null) openSession(sessionId);
