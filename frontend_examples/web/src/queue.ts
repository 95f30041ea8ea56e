/**
 * The queue panel (SPEC U2): one Auto-run switch with its pause reason and what holds the queue,
 * and every entry — the head included — with Send Now, Edit and Remove, reordered by dragging or
 * with ↑ / ↓. No "run next", bulk Send Now or skip. The switch and the rows show the backend's
 * state only: a click sends a mutation, and the answer (or a live event) redraws.
 */
import type { QueueEntry, QueueStatus } from "./api";
import { $, button, el } from "./dom";

export interface QueueActions {
  setAutoRun(autoRun: boolean): void;
  sendNow(entry: QueueEntry): void;
  remove(entry: QueueEntry): void;
  save(entry: QueueEntry, content: string): void;
  /** The queue in a new order (every entry's id), from the state it was drawn from. */
  reorder(orderedIds: string[], queue: QueueStatus): void;
}

const PAUSED: Record<NonNullable<QueueStatus["pauseReason"]>, string> = {
  USER: "Paused: Auto-run was turned off. The running turn finishes; the queue waits.",
  CANCEL: "Paused by a cancel: the backlog waits until Auto-run is on again.",
  TRANSFER: "Paused: the task moved here from a paused session.",
};

const HOLDS: Record<QueueStatus["heldBy"][number], string> = {
  BUSY: "a turn is running",
  APPROVAL: "waiting for your approval",
  CANCELLING: "cancelling",
  CLARIFICATION: "waiting for your answer",
  NOT_PROMPTABLE: "the session takes no prompts",
  WORKFLOW_TRANSITION: "moving to the next step",
};

/** The row being edited, with its draft (kept across redraws). */
let editing: { entryId: string; draft: string } | null = null;
/** The row being dragged. */
let dragged: string | null = null;

export function renderQueue(queue: QueueStatus, actions: QueueActions): void {
  const autoRun = $<HTMLInputElement>("auto-run");
  autoRun.checked = queue.autoRun;
  autoRun.onchange = () => {
    const wanted = autoRun.checked;
    autoRun.checked = queue.autoRun; // the switch shows the backend's value until it answers
    actions.setAutoRun(wanted);
  };
  const reason = $("pause-reason");
  reason.dataset.reason = queue.autoRun ? "" : (queue.pauseReason ?? "");
  reason.textContent = queue.autoRun ? "" : PAUSED[queue.pauseReason ?? "USER"];
  $("held-by").replaceChildren(
    ...queue.heldBy.map((hold) => {
      const chip = el("li", { className: "hold", textContent: HOLDS[hold] });
      chip.dataset.hold = hold;
      chip.title = hold;
      return chip;
    }),
  );
  const count = queue.max === null ? `${queue.count}` : `${queue.count} / ${queue.max}`;
  $("queue-count").textContent = count;
  $("queue-revision").textContent = String(queue.revision);
  if (editing && !queue.entries.some((e) => e.id === editing?.entryId)) editing = null;
  $("queue").replaceChildren(...queue.entries.map((entry) => row(entry, queue, actions)));
  $("queue-empty").hidden = queue.entries.length > 0;
}

function row(entry: QueueEntry, queue: QueueStatus, actions: QueueActions): HTMLLIElement {
  const ids = queue.entries.map((e) => e.id);
  const index = ids.indexOf(entry.id);
  const redraw = () => renderQueue(queue, actions);
  const move = (to: number) => {
    if (to < 0 || to >= ids.length || to === index) return;
    const order = ids.filter((id) => id !== entry.id);
    order.splice(to, 0, entry.id);
    actions.reorder(order, queue);
  };
  const isEditing = editing?.entryId === entry.id;
  let content: HTMLElement;
  if (isEditing && editing) {
    const input = el("input", { className: "content", value: editing.draft });
    input.setAttribute("aria-label", "Entry text");
    input.addEventListener("input", () => {
      if (editing) editing.draft = input.value;
    });
    input.addEventListener("keydown", (event) => {
      if (event.key === "Enter") save();
      if (event.key === "Escape") discard();
    });
    content = input;
  } else {
    content = el("span", { className: "content", textContent: entry.content });
  }
  const save = () => {
    if (editing) actions.save(entry, editing.draft);
    editing = null;
    redraw();
  };
  const discard = () => {
    editing = null;
    redraw();
  };
  const edit = () => {
    editing = { entryId: entry.id, draft: entry.content };
    redraw();
    document.querySelector<HTMLInputElement>(`li[data-entry-id="${entry.id}"] input`)?.focus();
  };
  const tools = isEditing
    ? [button("Save", save), button("Discard", discard)]
    : [
        button("Send now", () => actions.sendNow(entry), "Send Now"),
        button("✎", edit, "Edit"),
        button("✕", () => actions.remove(entry), "Remove"),
        button("↑", () => move(index - 1), "Move up"),
        button("↓", () => move(index + 1), "Move down"),
      ];
  const li = el(
    "li",
    { className: "entry", draggable: !isEditing },
    el("span", { className: "handle", textContent: "⠿", title: "Drag to reorder" }),
    el("span", { className: "position", textContent: String(index + 1) }),
    content,
    el("span", { className: "tools" }, ...tools),
  );
  li.dataset.entryId = entry.id;
  li.dataset.source = entry.source;
  li.dataset.clientMessageId = entry.clientMessageId ?? ""; // Q15: replaces a pending row
  // Drag and drop: the dragged row goes where it is dropped.
  li.addEventListener("dragstart", (event) => {
    dragged = entry.id;
    event.dataTransfer?.setData("text/plain", entry.id);
    li.classList.add("dragging");
  });
  li.addEventListener("dragend", () => {
    dragged = null;
    li.classList.remove("dragging");
  });
  li.addEventListener("dragover", (event) => {
    if (dragged !== null && dragged !== entry.id) event.preventDefault();
  });
  li.addEventListener("drop", (event) => {
    event.preventDefault();
    const moving = dragged ?? event.dataTransfer?.getData("text/plain") ?? null;
    dragged = null;
    if (moving === null || moving === entry.id || !ids.includes(moving)) return;
    const order = ids.filter((id) => id !== moving);
    order.splice(order.indexOf(entry.id) + (ids.indexOf(moving) < index ? 1 : 0), 0, moving);
    actions.reorder(order, queue);
  });
  return li;
}
