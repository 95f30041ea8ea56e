// GraphiQL's fetcher for turnqueue: queries and mutations over HTTP POST with the header editor's
// headers; subscriptions over WebSocket (graphql-transport-ws, the only protocol turnqueue
// speaks), authenticated the way turnqueue expects it: the header editor's Authorization value
// goes as `{"authorization": "Bearer …"}` in connection_init (SPEC S1).
import { createGraphiQLFetcher, type Fetcher, type FetcherOpts } from "@graphiql/toolkit";
import { createClient, type Client } from "graphql-ws";

/** The `Authorization` header's value among the editor's headers (any letter case). */
export function authorizationOf(
  headers: FetcherOpts["headers"] | Record<string, unknown>,
): string | undefined {
  for (const [name, value] of Object.entries(headers ?? {})) {
    if (name.toLowerCase() === "authorization" && typeof value === "string") return value;
  }
  return undefined;
}

export function webSocketUrl(httpUrl: string): string {
  const url = new URL(httpUrl);
  url.protocol = url.protocol === "https:" ? "wss:" : "ws:";
  url.hash = "";
  return url.toString();
}

/**
 * One graphql-ws client per Authorization value: the token is fixed for a connection's life, so
 * a changed header opens a new (lazy) connection and closes the old one.
 */
export function turnqueueFetcher(url: string): Fetcher {
  let current: { authorization: string | undefined; client: Client; fetcher: Fetcher } | null =
    null;
  return (params, opts) => {
    const authorization = authorizationOf(opts?.headers);
    if (current === null || current.authorization !== authorization) {
      current?.client.dispose();
      const client = createClient({
        url: webSocketUrl(url),
        connectionParams: authorization === undefined ? {} : { authorization },
      });
      current = { authorization, client, fetcher: createGraphiQLFetcher({ url, wsClient: client }) };
    }
    return current.fetcher(params, opts);
  };
}
