/**
 * turnqueue's web page (SPEC U2): the task list, the open session as a conversation (turn
 * output, tool calls, plans and approvals as they stream), the queue panel, Cancel with its
 * pending state, and a composer — over one WebSocket whose real state the header shows.
 *
 * `/` lists the tasks; picking one opens its session in place (`?session=ID` in the address, so
 * a reload or a link opens it again). What a session shows is merged by revision
 * (src/session.ts), so two tabs on one session agree.
 */
import {
  AGENTS,
  createApi,
  GraphQLRequestError,
  TASKS,
  type MutationInput,
  type MutationName,
  type MutationResult,
  type QueueEntry,
  type QueueStatus,
  type TaskSummary,
} from "./api";
import { Composer } from "./composer";
import { LABELS } from "./connection";
import {
  renderApproval,
  renderClarification,
  renderHead,
  renderItems,
  renderOutput,
  renderTurns,
} from "./conversation";
import { $, keepAtBottom } from "./dom";
import { renderQueue, type QueueActions } from "./queue";
import { cancellationShown, RevisionBook } from "./revisions";
import { SessionView, type Kinds } from "./session";
import { renderAgents, renderTasks, sessionHref } from "./tasks";

const book = new RevisionBook<Kinds>();
let view: SessionView | null = null;
let connected = false;
/** Snapshots merged so far, in `<body data-snapshots>`: tests wait on it instead of sleeping. */
let snapshotsMerged = 0;
let tasks: TaskSummary[] = [];
let olderTasks: string | null = null; // the cursor of the next page, if any

function showError(message: string | null): void {
  $("errors").textContent = message ?? "";
}

const api = createApi(new URLSearchParams(location.search).get("token"), {
  connected() {
    connected = true;
    view?.connected(); // from the offsets held, then the snapshot (R3, O2)
    void loadTasks();
    void loadAgents();
  },
  closed() {
    connected = false;
    view?.closed();
  },
  state(state) {
    const conn = $("conn");
    conn.dataset.state = state;
    conn.textContent = LABELS[state];
  },
});

// ---- the open session --------------------------------------------------------------------------

function openSession(id: string | null, remember = true): void {
  if (view?.id === id) return;
  view?.dispose();
  view = null;
  if (remember) history.pushState(null, "", sessionHref(id));
  $("session-panel").hidden = id === null;
  $("queue-panel").hidden = id === null;
  $("welcome").hidden = id !== null;
  for (const list of ["turns", "queue", "held-by", "pending-turns", "pending-entries"]) {
    $(list).replaceChildren();
  }
  for (const text of [
    "session-title",
    "session-state",
    "pause-reason",
    "queue-count",
    "send-outcome",
  ]) {
    $(text).textContent = "";
  }
  renderTasks(tasks, id, (next) => openSession(next));
  if (id === null) return;
  view = new SessionView(id, api, book, {
    session: renderSession,
    queue: () => {
      if (view?.queue) renderQueue(view.queue, queueActions);
      composer.render(); // a server entry replaces its optimistic row (Q15)
    },
    cancellation: renderCancellation,
    output: () => view && renderOutput(view.session, view),
    items: () => view && renderItems(view.session, view),
    snapshot: () => (document.body.dataset.snapshots = String(++snapshotsMerged)),
    error: showError,
  });
  view.start(connected);
}

window.addEventListener("popstate", () => {
  openSession(new URLSearchParams(location.search).get("session"), false);
});
window.addEventListener("pagehide", () => view?.save());

function renderSession(): void {
  const session = view?.session;
  if (!view || !session) return;
  const current = view;
  // What asks for the user sits under the conversation: keep its end in sight as it appears.
  keepAtBottom($("conversation"), () => {
    renderHead(session, (id) => openSession(id));
    renderTurns(session, current);
    renderApproval(session.pendingApproval, (approvalId, optionId) => {
      void mutate("answerApproval", { approvalId, optionId });
    });
    renderClarification(session);
    composer.render(); // a server turn replaces its optimistic row (Q15)
  });
  renderCancellation();
  // The task list shows the open session's state as it changes.
  tasks = tasks.map((task) =>
    task.currentSession?.id === session.id
      ? { ...task, currentSession: { ...task.currentSession, state: session.state } }
      : task,
  );
  renderTasks(tasks, session.id, (next) => openSession(next));
}

function renderCancellation(): void {
  if (!view) return;
  const backend = view.cancellation;
  const shown = cancellationShown(backend, view.optimisticCancel);
  const state = $("cancel-state");
  state.dataset.pending = String(shown.pending);
  const label = shown.optimistic ? "cancelling… (sent)" : "cancelling…";
  state.textContent = shown.pending ? label : "";
  const session = view.session;
  const cancellable =
    session !== undefined &&
    (session.state === "RUNNING" || session.state === "STARTING" || session.clarification !== null);
  $<HTMLButtonElement>("cancel").disabled = shown.pending || !cancellable;
  $("cancellation-revision").textContent = backend ? String(backend.revision) : "";
}

// ---- actions ----------------------------------------------------------------------------------

async function mutate<K extends MutationName>(
  name: K,
  input: MutationInput<K>,
): Promise<MutationResult | null> {
  try {
    const result = await api.mutate(name, input);
    view?.offerQueue(result.queue);
    view?.offerCancellation(result.cancellation);
    showError(result.userErrors.map((e) => `${e.code}: ${e.message}`).join("; ") || null);
    return result;
  } catch (e) {
    showError(e instanceof GraphQLRequestError ? e.message : `${name}: ${String(e)}`);
    return null;
  }
}

const queueActions: QueueActions = {
  setAutoRun: (autoRun) => view && void mutate("setAutoRun", { sessionId: view.id, autoRun }),
  sendNow: (entry: QueueEntry) =>
    view && void mutate("sendNow", { sessionId: view.id, scope: "ENTRY", entryId: entry.id }),
  remove: (entry) =>
    view && void mutate("removeQueueEntry", { sessionId: view.id, entryId: entry.id }),
  save: (entry, content) =>
    view && void mutate("updateQueueEntry", { sessionId: view.id, entryId: entry.id, content }),
  reorder: (orderedIds: string[], queue: QueueStatus) =>
    void mutate("reorderQueue", {
      sessionId: queue.sessionId,
      orderedIds,
      expectedRevision: queue.revision,
    }),
};

async function loadTasks(after: string | null = null): Promise<void> {
  try {
    const page = (await api.query(TASKS, { after })).tasksConnection;
    const fetched = page.edges.map((edge) => edge.node);
    const listed = after === null ? fetched : [...tasks, ...fetched];
    olderTasks = page.pageInfo.hasNextPage ? (page.pageInfo.endCursor ?? null) : null;
    $("more-tasks").hidden = olderTasks === null;
    // The same list is not drawn again: a refresh on focus (the click that focused the window)
    // would replace the link between its mousedown and its mouseup, and the click would be lost.
    if (JSON.stringify(listed) === JSON.stringify(tasks) && tasks.length > 0) return;
    tasks = listed;
    renderTasks(tasks, view?.id ?? null, (next) => openSession(next));
  } catch (e) {
    showError(`tasks: ${String(e)}`);
  }
}

async function loadAgents(): Promise<void> {
  try {
    const { agents } = await api.query(AGENTS, {});
    renderAgents(agents);
    composer.setAgents(agents);
  } catch (e) {
    showError(`agents: ${String(e)}`);
  }
}

$("more-tasks").addEventListener("click", () => void loadTasks(olderTasks));
window.addEventListener("focus", () => void loadTasks()); // tasks made in another tab

$<HTMLFormElement>("new-task").addEventListener("submit", (event) => {
  event.preventDefault();
  const titleInput = $<HTMLInputElement>("new-task-title");
  const title = titleInput.value.trim();
  const agent = $<HTMLSelectElement>("new-task-agent").value || null;
  if (title === "") return;
  void mutate("createTask", { title, agent }).then((result) => {
    if (!result?.session) return;
    titleInput.value = "";
    openSession(result.session.id);
    void loadTasks();
  });
});

const composer = new Composer(api, { view: () => view, showError });

/** Send (AUTO), Steer or Add to queue; while the agent asks a question, Send answers it. */
function compose(delivery: "AUTO" | "STEER" | "QUEUE"): void {
  const input = $<HTMLTextAreaElement>("message");
  const content = input.value;
  const clarification = view?.session?.clarification ?? null;
  if (!view || clarification === null || delivery === "QUEUE") {
    composer.send(delivery); // Q15: an optimistic row, matched by its clientMessageId
    return;
  }
  if (content.trim() === "") return;
  input.value = ""; // cleared at once, so the next message can be typed; put back on failure
  void mutate("answerClarification", {
    sessionId: view.id,
    answer: content,
    clarificationId: clarification.id,
  }).then((result) => {
    if ((!result || result.userErrors.length > 0) && input.value === "") input.value = content;
  });
}

$<HTMLFormElement>("compose").addEventListener("submit", (event) => {
  event.preventDefault();
  compose("AUTO");
});
$("message").addEventListener("keydown", (event) => {
  if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
    event.preventDefault();
    compose("AUTO");
  }
});
$("enqueue").addEventListener("click", () => compose("QUEUE"));
$("steer").addEventListener("click", () => compose("STEER"));

$("cancel").addEventListener("click", () => {
  const current = view;
  if (!current) return;
  // Optimistic pending from the click until the backend's first newer value (SPEC §7).
  const clicked = { clickedAt: current.cancellation?.revision ?? 0 };
  current.optimisticCancel = clicked;
  renderCancellation();
  void mutate("cancel", { sessionId: current.id }).finally(() => {
    if (current.optimisticCancel === clicked) current.optimisticCancel = null;
    renderCancellation();
  });
});

// ---- start ------------------------------------------------------------------------------------

void loadTasks(); // over HTTP: the list does not wait for the socket
openSession(new URLSearchParams(location.search).get("session"), false);
