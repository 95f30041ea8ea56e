import { describe, expect, it } from "vitest";
import { conversationNote } from "./conversation";

describe("A8: the head says how the agent's conversation was started", () => {
  it("names a resumed or reloaded conversation, and a new one that replaced the last", () => {
    expect(conversationNote({ agentConversation: null })).toBe("");
    const started = (resumed: "NEW" | "RESUMED" | "LOADED", resumeError: string | null = null) =>
      conversationNote({ agentConversation: { resumed, resumeError } });
    expect(started("NEW")).toBe("");
    expect(started("RESUMED")).toBe(" · conversation resumed");
    expect(started("LOADED")).toBe(" · conversation reloaded");
    expect(started("NEW", "Session is active")).toBe(
      " · new conversation (could not continue the last)",
    );
  });
});
