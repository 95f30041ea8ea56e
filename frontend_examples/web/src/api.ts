/**
 * The GraphQL side: documents for the parts of SPEC §7 the page uses, typed from schema.graphql
 * by GraphQL Code Generator (src/gql/), queries and mutations over HTTP POST, subscriptions over
 * one graphql-transport-ws socket (graphql-ws). Only the current API: connections
 * (`tasksConnection`, `turnsConnection`), no deprecated field (`turnqueue schema check --strict`).
 *
 * The endpoint is same-origin `/graphql`. An optional `?token=` in the page's address is sent as
 * `Authorization: Bearer …` on HTTP and as `{"authorization": "Bearer …"}` in connection_init (S1).
 *
 * The socket opens at once (not on the first subscription) and its state is reported as it
 * really is (src/connection.ts): pings every 10 s, a missing pong closes it, and a reconnect
 * waiting out its back-off is tried at once when the network comes back or the page is shown
 * again after sleep.
 */
import type { DocumentTypeDecoration } from "@graphql-typed-document-node/core";
import { createClient, type Client } from "graphql-ws";
import { graphql } from "./gql";
import {
  connectionState,
  PONG_TIMEOUT,
  retryDelay,
  seemsDead,
  Waker,
  type ConnectionState,
} from "./connection";
import type {
  AgentsQuery,
  CancellationFragment,
  ErrorCode,
  ItemFieldsFragment,
  SendOutcome,
  QueueFragment,
  SessionCoreFragment,
  TasksQuery,
  TurnFieldsFragment,
  TurnOutputSubscription,
  TurnOutputSubscriptionVariables,
  TurnItemsSubscription,
  TypedDocumentString,
} from "./gql/graphql";

// Every document is a graphql(`…`) call: GraphQL Code Generator (`npm run codegen`, client
// preset) types it from the repository's schema.graphql into src/gql/, and answers each call
// with a TypedDocumentString (the document, its fragments appended, and its result and
// variables types).

graphql(`
  fragment Queue on QueueStatus {
    id sessionId autoRun pauseReason heldBy count max revision
    entries { id position content source clientMessageId }
  }
`);
graphql(`
  fragment Cancellation on CancellationStatus {
    id sessionId pending revision
  }
`);
graphql(`
  fragment TurnFields on Turn {
    id prompt source status output error startedAt endedAt clientMessageId
  }
`);
graphql(`
  fragment ItemFields on TurnItem {
    __typename index
    ... on MessageItem { text }
    ... on ThoughtItem { text }
    ... on ToolCallItem { toolCallId title toolKind status text locations { path line } }
    ... on PlanItem { entries { content priority status } }
    ... on RawItem { json }
    ... on SteerItem { text entryId }
  }
`);
graphql(`
  fragment SessionCore on Session {
    id taskId agent state revision promptable agentError
    agentConversation { resumed resumeError }
    clarification { id question }
    pendingApproval { id title toolCallId options { id name kind } }
    currentTurn { ...TurnFields }
    turnsConnection(last: 20) { edges { node { ...TurnFields } } }
    task { id title workflowStep currentSession { id } }
  }
`);

export type Turn = TurnFieldsFragment;
export type QueueStatus = QueueFragment;
export type QueueEntry = QueueFragment["entries"][number];
export type CancellationStatus = CancellationFragment;
/** The session's own state: what its revision orders (R1). */
export type SessionCore = SessionCoreFragment;
export type SessionSnapshot = SessionCore & {
  queue: QueueStatus;
  cancellation: CancellationStatus;
};
export type TaskSummary = TasksQuery["tasksConnection"]["edges"][number]["node"];
export type TaskPage = TasksQuery["tasksConnection"];
export type AgentSummary = AgentsQuery["agents"][number];
export type TurnOutputChunk = TurnOutputSubscription["turnOutput"];
/** The variables of turnOutput and of turnItems (the same: a session, a turn, an offset). */
export type TurnStreamVariables = TurnOutputSubscriptionVariables;
export type TurnItemsChunk = TurnItemsSubscription["turnItems"];
export type TurnItem = ItemFieldsFragment;
export type Approval = NonNullable<SessionCoreFragment["pendingApproval"]>;
export interface UserError {
  code: ErrorCode;
  message: string;
}

export const SESSION_SNAPSHOT = graphql(`
  query SessionSnapshot($id: ID!) {
    session(id: $id) { ...SessionCore queue { ...Queue } cancellation { ...Cancellation } }
  }
`);

export const TASKS = graphql(`
  query Tasks($after: String) {
    tasksConnection(first: 30, after: $after) {
      edges { node { id title workflowStep createdAt currentSession { id state agent } } }
      pageInfo { hasNextPage endCursor }
    }
  }
`);

export const AGENTS = graphql(`
  query Agents { agents { name type steering } }
`);

export const SUBSCRIPTIONS = {
  queue: graphql(`
    subscription QueueStatusChanged($sessionId: ID!) {
      queueStatusChanged(sessionId: $sessionId) { ...Queue }
    }
  `),
  cancellation: graphql(`
    subscription CancellationChanged($sessionId: ID!) {
      cancellationChanged(sessionId: $sessionId) { ...Cancellation }
    }
  `),
  session: graphql(`
    subscription SessionChanged($sessionId: ID!) {
      sessionChanged(sessionId: $sessionId) { ...SessionCore cancellation { ...Cancellation } }
    }
  `),
  // Resumable (O2): with `turnId` and `afterOffset` only what follows is sent.
  output: graphql(`
    subscription TurnOutput($sessionId: ID!, $turnId: ID, $afterOffset: Int) {
      turnOutput(sessionId: $sessionId, turnId: $turnId, afterOffset: $afterOffset) {
        sessionId turnId offset text done status
      }
    }
  `),
  // A3: the turn's items, resumable the same way (their offsets count log entries).
  items: graphql(`
    subscription TurnItems($sessionId: ID!, $turnId: ID, $afterOffset: Int) {
      turnItems(sessionId: $sessionId, turnId: $turnId, afterOffset: $afterOffset) {
        sessionId turnId offset nextOffset done status items { ...ItemFields }
      }
    }
  `),
} as const;

export const MUTATIONS = {
  createTask: graphql(`
    mutation CreateTask($input: CreateTaskInput!) {
      createTask(input: $input) { task { id } session { id } userErrors { code message } }
    }
  `),
  sendMessage: graphql(`
    mutation SendMessage($input: SendMessageInput!) {
      sendMessage(input: $input) {
        queue { ...Queue }
        turn { id clientMessageId }
        queuedEntry { id clientMessageId }
        outcome
        userErrors { code message }
      }
    }
  `),
  enqueueMessage: graphql(`
    mutation EnqueueMessage($input: EnqueueMessageInput!) {
      enqueueMessage(input: $input) {
        queue { ...Queue }
        entry { id clientMessageId }
        dispatched
        userErrors { code message }
      }
    }
  `),
  updateQueueEntry: graphql(`
    mutation UpdateQueueEntry($input: UpdateQueueEntryInput!) {
      updateQueueEntry(input: $input) { queue { ...Queue } userErrors { code message } }
    }
  `),
  removeQueueEntry: graphql(`
    mutation RemoveQueueEntry($input: RemoveQueueEntryInput!) {
      removeQueueEntry(input: $input) { queue { ...Queue } userErrors { code message } }
    }
  `),
  reorderQueue: graphql(`
    mutation ReorderQueue($input: ReorderQueueInput!) {
      reorderQueue(input: $input) { queue { ...Queue } userErrors { code message } }
    }
  `),
  setAutoRun: graphql(`
    mutation SetAutoRun($input: SetAutoRunInput!) {
      setAutoRun(input: $input) { queue { ...Queue } dispatched userErrors { code message } }
    }
  `),
  sendNow: graphql(`
    mutation SendNow($input: SendNowInput!) {
      sendNow(input: $input) { queue { ...Queue } sentCount userErrors { code message } }
    }
  `),
  answerClarification: graphql(`
    mutation AnswerClarification($input: AnswerClarificationInput!) {
      answerClarification(input: $input) { session { id } userErrors { code message } }
    }
  `),
  answerApproval: graphql(`
    mutation AnswerApproval($input: AnswerApprovalInput!) {
      answerApproval(input: $input) { approval { id } session { id } userErrors { code message } }
    }
  `),
  cancel: graphql(`
    mutation Cancel($input: CancelInput!) {
      cancel(input: $input) { cancellation { ...Cancellation } outcome userErrors { code message } }
    }
  `),
} as const;

export type MutationName = keyof typeof MUTATIONS;

/** A document's result type, and its variables' (from its TypedDocumentString). */
export type ResultOf<D> = D extends DocumentTypeDecoration<infer R, infer _V> ? R : never;
export type VariablesOf<D> = D extends DocumentTypeDecoration<infer _R, infer V> ? V : never;
/** The `input` a mutation takes, as the schema types it. */
export type MutationInput<K extends MutationName> = VariablesOf<(typeof MUTATIONS)[K]>["input"];

/** Raised for top-level GraphQL errors (faults, authentication): not the payload's userErrors. */
export class GraphQLRequestError extends Error {}

export interface Api {
  query<R, V>(document: TypedDocumentString<R, V>, variables: V): Promise<R>;
  /** A mutation's payload as the schema types it (each is also a MutationResult). */
  mutate<K extends MutationName>(
    name: K,
    input: MutationInput<K>,
  ): Promise<Payload<K> & MutationResult>;
  ws: Client;
}

export type { ConnectionState, SendOutcome };

/** A mutation's payload: the fields the page reads from any of them. */
export interface MutationResult {
  userErrors: UserError[];
  queue?: QueueStatus | null;
  cancellation?: CancellationStatus | null;
  task?: { id: string } | null;
  session?: { id: string } | null;
  approval?: { id: string } | null;
}

/** A mutation's generated payload type; tsc checks that every one is read as a MutationResult. */
export type Payload<K extends MutationName> = ResultOf<(typeof MUTATIONS)[K]> extends Record<K, infer P>
  ? P
  : never;
export const PAYLOADS_ARE_MUTATION_RESULTS: { [K in MutationName]: Payload<K> } extends Record<
  MutationName,
  MutationResult
>
  ? true
  : never = true;

export interface ConnectionEvents {
  /** The socket is open and acknowledged (the first time, and after every reconnect). */
  connected(): void;
  /** It closed (a reconnect follows unless it was refused). */
  closed(): void;
  /** The state the page shows changed. */
  state(state: ConnectionState): void;
}

function operationName(document: string): string | undefined {
  return /^\s*(?:query|mutation|subscription)\s+(\w+)/.exec(document)?.[1];
}

/** The server pings nothing (NOTES): the client pings every `KEEP_ALIVE` ms. */
const KEEP_ALIVE = 10_000;
/** 4403: a refused token; 4408: our own "no pong" close (graphql-ws's recipe). */
const REFUSED = 4403;
const NO_PONG = 4408;
/** An attempt whose acknowledgement has not come by then is closed and retried: its
 * connection_init may have been lost (a socket gone silent), and the client's pings cannot
 * find that before the ack (graphql-ws's default waits for ever; the server's own wait for the
 * init is 60 s). */
const ACK_TIMEOUT = 10_000;

export function createApi(token: string | null, events: ConnectionEvents): Api {
  const authorization = token ? `Bearer ${token}` : null;

  async function post<T>(document: string, variables: unknown): Promise<T> {
    const headers: Record<string, string> = { "content-type": "application/json" };
    if (authorization) headers.authorization = authorization;
    const response = await fetch("/graphql", {
      method: "POST",
      headers,
      body: JSON.stringify({ query: document, variables, operationName: operationName(document) }),
    });
    const body = (await response.json()) as { data?: T; errors?: { message: string }[] };
    if (body.errors?.length || body.data === undefined) {
      throw new GraphQLRequestError(body.errors?.map((e) => e.message).join("; ") ?? "no data");
    }
    return body.data;
  }

  const facts = { open: false, wasOpen: false, online: navigator.onLine, refused: false };
  let shown: ConnectionState | null = null;
  const report = () => {
    const state = connectionState(facts);
    if (state !== shown) events.state((shown = state));
  };
  const waker = new Waker();
  let socket: WebSocket | null = null;
  let lastHeard = Date.now();
  let pongTimer: ReturnType<typeof setTimeout> | undefined;

  const wsUrl = `${location.protocol === "https:" ? "wss" : "ws"}://${location.host}/graphql`;
  const ws = createClient({
    url: wsUrl,
    connectionParams: authorization ? { authorization } : {},
    // At once, not on the first subscription: the page shows the real state from the start,
    // with no session open too.
    lazy: false,
    onNonLazyError: () => {}, // a refused token is reported by `closed`
    keepAlive: KEEP_ALIVE,
    connectionAckWaitTimeout: ACK_TIMEOUT,
    retryAttempts: Number.POSITIVE_INFINITY,
    retryWait: (retries) => waker.wait(retryDelay(retries)),
    // 4403 is a refused token: retrying cannot help, so it is fatal (NOTES: graphql-ws pitfalls).
    shouldRetry: (e) => !(e instanceof CloseEvent && e.code === REFUSED),
    on: {
      connecting: () => report(),
      connected: (opened) => {
        socket = opened as WebSocket;
        lastHeard = Date.now();
        facts.open = facts.wasOpen = true;
        report();
        events.connected();
      },
      message: () => {
        lastHeard = Date.now();
      },
      ping: (received) => {
        if (received) return;
        clearTimeout(pongTimer);
        pongTimer = setTimeout(() => dropSocket(), PONG_TIMEOUT);
      },
      pong: (received) => {
        if (received) clearTimeout(pongTimer);
      },
      closed: (e) => {
        clearTimeout(pongTimer);
        socket = null;
        facts.open = false;
        if (e instanceof CloseEvent && e.code === REFUSED) facts.refused = true;
        report();
        events.closed();
      },
    },
  });

  /** Give up the open socket (silent too long): graphql-ws reconnects. */
  function dropSocket(): void {
    if (socket?.readyState === WebSocket.OPEN) socket.close(NO_PONG, "no pong");
  }

  /** A reason to try now: a waiting reconnect goes at once; a socket silent too long goes. */
  function wake(): void {
    facts.online = navigator.onLine;
    report();
    if (facts.refused) return;
    waker.wake();
    if (facts.open && seemsDead(lastHeard, Date.now(), KEEP_ALIVE)) dropSocket();
  }
  window.addEventListener("online", wake);
  window.addEventListener("offline", wake);
  window.addEventListener("pageshow", wake);
  document.addEventListener("visibilitychange", () => {
    if (document.visibilityState === "visible") wake();
  });
  report();

  return {
    query: (document, variables) => post(document.toString(), variables),
    async mutate(name, input) {
      const document = MUTATIONS[name].toString();
      type Answer = Payload<typeof name> & MutationResult;
      const data = await post<Partial<Record<typeof name, Answer>>>(document, { input });
      const payload = data[name];
      if (payload === undefined) throw new GraphQLRequestError(`no ${name} in the answer`);
      return payload;
    },
    ws,
  };
}
