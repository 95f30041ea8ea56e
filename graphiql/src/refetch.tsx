// With tokens on, the first introspection goes out with the placeholder and is refused. Once the
// header editor holds another Authorization value (valid JSON, settled for half a second), the
// schema is fetched again, so the docs and the explorer fill in without Shift-Ctrl-R.
import { useGraphiQL, useGraphiQLActions } from "@graphiql/react";
import { useEffect } from "react";

import { authorizationOf } from "./fetcher";

const SETTLE_MS = 500;

/** The Authorization value in the header editor's JSON; null while it is not valid JSON. */
export function authorizationIn(text: string): string | undefined | null {
  try {
    const headers: unknown = JSON.parse(text.trim() === "" ? "{}" : text);
    if (typeof headers !== "object" || headers === null || Array.isArray(headers)) return null;
    return authorizationOf(headers as Record<string, unknown>);
  } catch {
    return null;
  }
}

export function RefetchSchemaOnAuthorization(): null {
  const headerEditor = useGraphiQL((state) => state.headerEditor);
  const { introspect } = useGraphiQLActions();
  useEffect(() => {
    if (headerEditor === undefined) return;
    let last = authorizationIn(headerEditor.getValue());
    let timer: ReturnType<typeof setTimeout> | undefined;
    const subscription = headerEditor.onDidChangeModelContent(() => {
      clearTimeout(timer);
      timer = setTimeout(() => {
        const next = authorizationIn(headerEditor.getValue());
        if (next === null || next === last) return;
        last = next;
        void introspect();
      }, SETTLE_MS);
    });
    return () => {
      clearTimeout(timer);
      subscription.dispose();
    };
  }, [headerEditor, introspect]);
  return null;
}
