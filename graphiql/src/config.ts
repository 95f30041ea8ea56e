// What turnqueue tells the page (turnqueue/graphiql.py injects it before </head>): never a
// token, only whether the server wants one.
export interface PageConfig {
  /** The server has tokens configured: every request needs `Authorization: Bearer …`. */
  authRequired: boolean;
}

export const CONFIG_ELEMENT_ID = "turnqueue-graphiql-config";

export function readConfig(doc: Document = document): PageConfig {
  const text = doc.getElementById(CONFIG_ELEMENT_ID)?.textContent ?? "";
  try {
    const parsed: unknown = JSON.parse(text);
    if (typeof parsed === "object" && parsed !== null && "authRequired" in parsed) {
      return { authRequired: parsed.authRequired === true };
    }
  } catch {
    // No config (e.g. `vite preview`): behave as a server without tokens.
  }
  return { authRequired: false };
}

/** The header editor's contents for a new tab: a placeholder to replace, when tokens are on. */
export function defaultHeaders(config: PageConfig): string | undefined {
  return config.authRequired
    ? JSON.stringify({ Authorization: "Bearer <token>" }, null, 2)
    : undefined;
}
