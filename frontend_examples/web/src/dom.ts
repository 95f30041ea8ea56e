/** Small DOM helpers: the page uses no UI framework. */

export function $<T extends HTMLElement = HTMLElement>(id: string): T {
  const element = document.getElementById(id);
  if (element === null) throw new Error(`#${id} is missing`);
  return element as T;
}

/** `document.createElement(tag)` with properties and children. */
export function el<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  props: Partial<HTMLElementTagNameMap[K]> = {},
  ...children: (Node | string)[]
): HTMLElementTagNameMap[K] {
  const element = Object.assign(document.createElement(tag), props);
  element.append(...children);
  return element;
}

/** A button that runs `action` when clicked; `label` is its accessible name when given. */
export function button(text: string, action: () => void, label?: string): HTMLButtonElement {
  const b = el("button", { type: "button", textContent: text });
  if (label !== undefined) {
    b.setAttribute("aria-label", label);
    b.title = label;
  }
  b.addEventListener("click", action);
  return b;
}

/** A duration between two ISO times, for people: "2.1 s", "3 min 4 s". */
export function duration(from: string, to: string | null): string {
  if (to === null) return "";
  const seconds = Math.max(0, (Date.parse(to) - Date.parse(from)) / 1000);
  if (seconds < 60) return `${seconds.toFixed(1)} s`;
  return `${Math.floor(seconds / 60)} min ${Math.round(seconds % 60)} s`;
}

/** Run `render` and keep `scroller` at its bottom if it was there before (a chat's scroll). */
export function keepAtBottom(scroller: HTMLElement, render: () => void): void {
  const atBottom = scroller.scrollHeight - scroller.scrollTop - scroller.clientHeight < 80;
  render();
  if (atBottom) scroller.scrollTop = scroller.scrollHeight;
}

/** A session state as people read it; the API's name stays in `data-state` (and the tooltip). */
const STATES: Record<string, string> = {
  CREATED: "new",
  STARTING: "starting",
  RUNNING: "running",
  WAITING_FOR_INPUT: "ready",
  COMPLETED: "completed",
  FAILED: "failed",
  CANCELLED: "closed",
};

export function setState(badge: HTMLElement, state: string): void {
  badge.textContent = STATES[state] ?? state.toLowerCase();
  badge.dataset.state = state;
  badge.title = state;
}
