/**
 * The task list (newest first, from `tasksConnection`, a page at a time) and the agents a new
 * task can run with (`agents`). Picking a task opens its current session.
 */
import type { AgentSummary, TaskSummary } from "./api";
import { $, el, setState } from "./dom";

/** The address of a session's page, keeping the other parameters (`?token=`). */
export function sessionHref(sessionId: string | null): string {
  const params = new URLSearchParams(location.search);
  if (sessionId === null) params.delete("session");
  else params.set("session", sessionId);
  const query = params.toString();
  return query ? `?${query}` : location.pathname;
}

export function renderTasks(
  tasks: readonly TaskSummary[],
  openSessionId: string | null,
  pick: (sessionId: string) => void,
): void {
  $("tasks").replaceChildren(
    ...tasks.map((task) => {
      const session = task.currentSession;
      const link = el("a", { className: "task-link", textContent: task.title });
      const meta = el("small", { className: "task-meta" });
      if (session) {
        link.href = sessionHref(session.id);
        link.addEventListener("click", (event) => {
          if (event.metaKey || event.ctrlKey || event.shiftKey || event.button !== 0) return;
          event.preventDefault(); // opened in this page, without a reload
          pick(session.id);
        });
        const state = el("span", { className: "badge" });
        setState(state, session.state);
        meta.append(state, ` ${session.agent} · ${task.workflowStep.toLowerCase()}`);
      }
      const li = el("li", { className: "task" }, link, meta);
      if (session && session.id === openSessionId) li.setAttribute("aria-current", "true");
      return li;
    }),
  );
  $("tasks-empty").hidden = tasks.length > 0;
}

/** The new task's agent choices: the server's default first (no `agent` sent), then each. */
export function renderAgents(agents: readonly AgentSummary[]): void {
  const select = $<HTMLSelectElement>("new-task-agent");
  const chosen = select.value;
  select.replaceChildren(
    el("option", { value: "", textContent: "default agent" }),
    ...agents.map((a) => {
      const type = a.type.toLowerCase();
      const label = a.name === type ? a.name : `${a.name} (${type})`;
      return el("option", { value: a.name, textContent: label });
    }),
  );
  select.value = agents.some((a) => a.name === chosen) ? chosen : "";
}
