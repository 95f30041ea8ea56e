/**
 * The open session as a conversation: its head (title, state, agent, Cancel), its turns — each a
 * prompt and the agent's answer: thoughts, tool calls with their status, plans (SPEC A3), then
 * the text — and what waits for the user (an approval with its options as buttons, A6; a
 * clarification, answered from the composer).
 *
 * The current turn's text is `#output` and its items `#items`: they are redrawn alone as chunks
 * stream (`renderOutput`, `renderItems`); the rest is redrawn when the session's revision moves.
 */
import type { Approval, SessionCore, Turn, TurnItem } from "./api";
import { $, button, duration, el, keepAtBottom, setState } from "./dom";

export interface TurnContent {
  /** The text the page holds for a turn (streamed, resumable), if any. */
  text(turnId: string): string | undefined;
  /** The items the page holds for a turn, if any. */
  items(turnId: string): readonly TurnItem[] | undefined;
}

const STATUS_TEXT: Record<Turn["status"], string> = {
  RUNNING: "working…",
  COMPLETED: "done",
  CANCELLED: "cancelled",
  FAILED: "failed",
};

/** A8: how the agent's conversation was started the last time its agent was (re)started. */
export function conversationNote(session: Pick<SessionCore, "agentConversation">): string {
  const conversation = session.agentConversation;
  if (!conversation) return "";
  if (conversation.resumeError) return " · new conversation (could not continue the last)";
  if (conversation.resumed === "RESUMED") return " · conversation resumed";
  if (conversation.resumed === "LOADED") return " · conversation reloaded";
  return "";
}

export function renderHead(session: SessionCore, openSession: (id: string) => void): void {
  $("session-title").textContent = session.task.title;
  setState($("session-state"), session.state);
  $("session-agent").textContent = `agent: ${session.agent}${conversationNote(session)}`;
  $("session-agent").title = session.agentConversation?.resumeError
    ? `could not continue the agent's conversation: ${session.agentConversation.resumeError}`
    : "";
  $("session-step").textContent = `step: ${session.task.workflowStep}`;
  $("session-revision").textContent = String(session.revision);
  const failed = $("agent-error");
  failed.hidden = session.agentError === null;
  failed.textContent = session.agentError ? `The agent could not start: ${session.agentError}` : "";
  // W3: a workflow step moved the task to a new session; offer it.
  const next = session.task.currentSession?.id;
  const moved = $("moved");
  moved.hidden = next === undefined || next === session.id;
  moved.replaceChildren();
  if (next !== undefined && next !== session.id) {
    const open = button("Open it", () => openSession(next));
    moved.append("This task continues in a new session. ", open);
  }
}

/** Every turn the session lists (oldest first), the current one last. */
export function renderTurns(session: SessionCore, content: TurnContent): void {
  const turns = session.turnsConnection.edges.map((edge) => edge.node);
  const current = session.currentTurn;
  if (current !== null && !turns.some((t) => t.id === current.id)) turns.push(current);
  const list = $("turns");
  keepAtBottom($("conversation"), () => {
    list.replaceChildren(...turns.map((turn) => turnNode(turn, turn.id === current?.id, content)));
  });
  $("conversation-empty").hidden = turns.length > 0;
}

function turnNode(turn: Turn, isCurrent: boolean, content: TurnContent): HTMLLIElement {
  const text = el("div", { className: "text", textContent: content.text(turn.id) ?? turn.output });
  const items = el("ol", { className: "items" }, ...itemNodes(content.items(turn.id) ?? []));
  if (isCurrent) {
    text.id = "output";
    text.dataset.turnId = turn.id;
    items.id = "items";
  }
  const status = el("span", { className: "turn-status", textContent: STATUS_TEXT[turn.status] });
  const foot = el("div", { className: "turn-foot" }, status);
  const took = duration(turn.startedAt, turn.endedAt);
  if (took) foot.append(el("span", { className: "took", textContent: took }));
  if (turn.error) foot.append(el("span", { className: "error", textContent: turn.error }));
  const li = el(
    "li",
    { className: "turn" },
    el("div", { className: `bubble ${turn.source.toLowerCase()}` }, turn.prompt),
    el("div", { className: "reply" }, items, text, foot),
  );
  li.dataset.turnId = turn.id;
  li.dataset.prompt = turn.prompt;
  li.dataset.status = turn.status;
  li.dataset.clientMessageId = turn.clientMessageId ?? ""; // Q15: what replaces a pending row
  return li;
}

/** The current turn's streamed text (a turn the page never streamed shows the snapshot's). */
export function renderOutput(session: SessionCore | undefined, content: TurnContent): void {
  const turn = session?.currentTurn;
  const output = document.getElementById("output");
  if (!turn || output === null || output.dataset.turnId !== turn.id) return;
  keepAtBottom($("conversation"), () => {
    output.textContent = content.text(turn.id) ?? turn.output;
  });
}

/** A3: the current turn's thoughts, tool calls and plans, as they stream. */
export function renderItems(session: SessionCore | undefined, content: TurnContent): void {
  const turn = session?.currentTurn;
  const list = document.getElementById("items");
  if (!turn || list === null) return;
  keepAtBottom($("conversation"), () => {
    list.replaceChildren(...itemNodes(content.items(turn.id) ?? []));
  });
}

/** Messages are the turn's text (shown once, from the transcript); the rest, in order. */
function itemNodes(items: readonly TurnItem[]): HTMLLIElement[] {
  return items.flatMap((item) => {
    const li = el("li", { className: `item ${item.__typename}` });
    switch (item.__typename) {
      case "MessageItem":
        return [];
      case "ThoughtItem":
        li.textContent = item.text;
        break;
      case "ToolCallItem": {
        li.dataset.status = item.status;
        if (item.toolKind && item.toolKind !== "other") {
          li.append(el("span", { className: "kind", textContent: item.toolKind }));
        }
        li.append(
          el("span", { className: "title", textContent: item.title }),
          el("span", { className: "status", textContent: item.status.replace("_", " ") }),
        );
        const where = item.locations.map((l) => (l.line === null ? l.path : `${l.path}:${l.line}`));
        if (where.length) {
          li.append(el("div", { className: "where", textContent: where.join(", ") }));
        }
        if (item.text) {
          li.append(el("details", {}, el("summary", { textContent: "output" }), item.text));
        }
        break;
      }
      case "PlanItem":
        li.append(
          el("div", { className: "label", textContent: "Plan" }),
          el(
            "ul",
            {},
            ...item.entries.map((entry) => {
              const step = el("li", { textContent: entry.content });
              step.dataset.status = entry.status;
              return step;
            }),
          ),
        );
        break;
      case "RawItem":
        li.append(el("code", { textContent: item.json }));
        break;
      case "SteerItem": // Q16: a message the user steered into this turn
        li.textContent = item.text;
        li.dataset.entryId = item.entryId;
        break;
    }
    return [li];
  });
}

/** A6: the agent's permission request, its options as buttons that answer it (once). */
export function renderApproval(
  approval: Approval | null,
  answer: (approvalId: string, optionId: string) => void,
): void {
  const box = $("approval");
  box.hidden = approval === null;
  box.dataset.approvalId = approval?.id ?? "";
  if (approval === null) return box.replaceChildren();
  const buttons = approval.options.map((option) => {
    const b = button(option.name, () => {
      for (const each of buttons) each.disabled = true; // once; the next revision redraws
      answer(approval.id, option.id);
    });
    b.dataset.kind = option.kind;
    if (option.kind.startsWith("allow")) b.className = "primary";
    return b;
  });
  box.replaceChildren(
    el("span", { className: "ask-label", textContent: "The agent asks to: " }),
    el("strong", { textContent: approval.title }),
    el("span", { className: "choices" }, ...buttons),
  );
}

/** The agent's question: the composer answers it while it is pending. */
export function renderClarification(session: SessionCore): void {
  const box = $("clarification");
  const question = session.clarification?.question ?? null;
  box.hidden = question === null;
  box.replaceChildren();
  if (question !== null) {
    box.append(
      el("span", { className: "ask-label", textContent: "The agent asks: " }),
      el("strong", { textContent: question }),
      el("span", { className: "hint", textContent: " Answer below." }),
    );
  }
  $("send").textContent = question === null ? "Send" : "Answer";
  $<HTMLTextAreaElement>("message").placeholder =
    question === null
      ? "Message the agent — Enter sends, Shift+Enter for a new line"
      : "Your answer";
}
