/**
 * The GraphQL side: documents and types for the parts of SPEC §7 the page uses, queries and
 * mutations over HTTP POST, subscriptions over one graphql-transport-ws socket (graphql-ws).
 *
 * The endpoint is same-origin `/graphql`. An optional `?token=` in the page's address is sent as
 * `Authorization: Bearer …` on HTTP and as `{"authorization": "Bearer …"}` in connection_init (S1).
 */
import { createClient, type Client } from "graphql-ws";
import type { TurnStatus } from "./revisions";

export type PauseReason = "USER" | "CANCEL" | "TRANSFER";
export type HoldReason =
  | "BUSY"
  | "NOT_PROMPTABLE"
  | "CLARIFICATION"
  | "CANCELLING"
  | "WORKFLOW_TRANSITION";

export interface Turn {
  id: string;
  prompt: string;
  source: string;
  status: TurnStatus;
  output: string;
  error: string | null;
}

export interface QueueEntry {
  id: string;
  position: number;
  content: string;
  source: string;
}

export interface QueueStatus {
  id: string;
  sessionId: string;
  autoRun: boolean;
  pauseReason: PauseReason | null;
  heldBy: HoldReason[];
  entries: QueueEntry[];
  count: number;
  max: number | null;
  revision: number;
}

export interface CancellationStatus {
  id: string;
  sessionId: string;
  pending: boolean;
  revision: number;
}

/** The session's own state: what its revision orders (R1). */
export interface SessionCore {
  id: string;
  taskId: string;
  agent: string;
  state: string;
  revision: number;
  promptable: boolean;
  clarification: { id: string; question: string } | null;
  currentTurn: Turn | null;
  turns: Turn[];
  task: { id: string; title: string; workflowStep: string };
}

export interface SessionSnapshot extends SessionCore {
  queue: QueueStatus;
  cancellation: CancellationStatus;
}

export interface TaskSummary {
  id: string;
  title: string;
  workflowStep: string;
  currentSession: { id: string; state: string } | null;
}

export interface UserError {
  code: string;
  message: string;
}

export interface TurnOutputChunk {
  sessionId: string;
  turnId: string;
  offset: number;
  text: string;
  done: boolean;
  status: TurnStatus;
}

const QUEUE = `fragment Queue on QueueStatus {
  id sessionId autoRun pauseReason heldBy count max revision
  entries { id position content source }
}`;
const CANCELLATION = `fragment Cancellation on CancellationStatus {
  id sessionId pending revision
}`;
const TURN = `fragment TurnFields on Turn { id prompt source status output error }`;
const SESSION = `fragment SessionCore on Session {
  id taskId agent state revision promptable
  clarification { id question }
  currentTurn { ...TurnFields }
  turns(last: 10) { ...TurnFields }
  task { id title workflowStep }
}
${TURN}`;

export const SESSION_SNAPSHOT = `query SessionSnapshot($id: ID!) {
  session(id: $id) { ...SessionCore queue { ...Queue } cancellation { ...Cancellation } }
}
${SESSION}
${QUEUE}
${CANCELLATION}`;

export const TASKS = `query Tasks {
  tasks(first: 50) { id title workflowStep currentSession { id state } }
}`;

export const SUBSCRIPTIONS = {
  queue: `subscription QueueStatusChanged($sessionId: ID!) {
    queueStatusChanged(sessionId: $sessionId) { ...Queue }
  }
  ${QUEUE}`,
  cancellation: `subscription CancellationChanged($sessionId: ID!) {
    cancellationChanged(sessionId: $sessionId) { ...Cancellation }
  }
  ${CANCELLATION}`,
  session: `subscription SessionChanged($sessionId: ID!) {
    sessionChanged(sessionId: $sessionId) { ...SessionCore cancellation { ...Cancellation } }
  }
  ${SESSION}
  ${CANCELLATION}`,
  output: `subscription TurnOutput($sessionId: ID!) {
    turnOutput(sessionId: $sessionId) { sessionId turnId offset text done status }
  }`,
} as const;

const ERRORS = "userErrors { code message }";

export const MUTATIONS = {
  createTask: `mutation CreateTask($input: CreateTaskInput!) {
    createTask(input: $input) { task { id } session { id } ${ERRORS} }
  }`,
  sendMessage: `mutation SendMessage($input: SendMessageInput!) {
    sendMessage(input: $input) { queue { ...Queue } ${ERRORS} }
  }
  ${QUEUE}`,
  enqueueMessage: `mutation EnqueueMessage($input: EnqueueMessageInput!) {
    enqueueMessage(input: $input) { queue { ...Queue } ${ERRORS} }
  }
  ${QUEUE}`,
  updateQueueEntry: `mutation UpdateQueueEntry($input: UpdateQueueEntryInput!) {
    updateQueueEntry(input: $input) { queue { ...Queue } ${ERRORS} }
  }
  ${QUEUE}`,
  removeQueueEntry: `mutation RemoveQueueEntry($input: RemoveQueueEntryInput!) {
    removeQueueEntry(input: $input) { queue { ...Queue } ${ERRORS} }
  }
  ${QUEUE}`,
  reorderQueue: `mutation ReorderQueue($input: ReorderQueueInput!) {
    reorderQueue(input: $input) { queue { ...Queue } ${ERRORS} }
  }
  ${QUEUE}`,
  setAutoRun: `mutation SetAutoRun($input: SetAutoRunInput!) {
    setAutoRun(input: $input) { queue { ...Queue } dispatched ${ERRORS} }
  }
  ${QUEUE}`,
  sendNow: `mutation SendNow($input: SendNowInput!) {
    sendNow(input: $input) { queue { ...Queue } sentCount ${ERRORS} }
  }
  ${QUEUE}`,
  cancel: `mutation Cancel($input: CancelInput!) {
    cancel(input: $input) { cancellation { ...Cancellation } outcome ${ERRORS} }
  }
  ${CANCELLATION}`,
} as const;

export type MutationName = keyof typeof MUTATIONS;

/** Raised for top-level GraphQL errors (faults, authentication): not the payload's userErrors. */
export class GraphQLRequestError extends Error {}

export interface Api {
  query<T>(document: string, variables?: Record<string, unknown>): Promise<T>;
  mutate(name: MutationName, input: Record<string, unknown>): Promise<MutationResult>;
  ws: Client;
}

/** A mutation's payload: the fields the page reads from any of them. */
export interface MutationResult {
  userErrors: UserError[];
  queue?: QueueStatus | null;
  cancellation?: CancellationStatus | null;
  task?: { id: string } | null;
  session?: { id: string } | null;
}

export interface ConnectionEvents {
  connected(): void;
  closed(fatal: string | null): void;
}

function operationName(document: string): string | undefined {
  return /^\s*(?:query|mutation|subscription)\s+(\w+)/.exec(document)?.[1];
}

export function createApi(token: string | null, events: ConnectionEvents): Api {
  const authorization = token ? `Bearer ${token}` : null;

  async function post<T>(document: string, variables: Record<string, unknown>): Promise<T> {
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

  const wsUrl = `${location.protocol === "https:" ? "wss" : "ws"}://${location.host}/graphql`;
  const ws = createClient({
    url: wsUrl,
    connectionParams: authorization ? { authorization } : {},
    keepAlive: 10_000, // the server answers pings but never sends them (NOTES)
    retryAttempts: Number.POSITIVE_INFINITY,
    // Back off from 0.3 s to 10 s, with jitter so that many pages do not reconnect at once.
    retryWait: (retries) =>
      new Promise((resolve) =>
        setTimeout(resolve, Math.min(300 * 2 ** retries, 10_000) + Math.random() * 300),
      ),
    // 4403 is a refused token: retrying cannot help, so it is fatal (NOTES: graphql-ws pitfalls).
    shouldRetry: (e) => !(e instanceof CloseEvent && e.code === 4403),
    on: {
      connected: () => events.connected(),
      closed: (e) =>
        events.closed(e instanceof CloseEvent && e.code === 4403 ? "not authorised" : null),
    },
  });

  return {
    query: (document, variables = {}) => post(document, variables),
    async mutate(name, input) {
      const data = await post<Record<string, MutationResult>>(MUTATIONS[name], { input });
      const payload = data[name];
      if (payload === undefined) throw new GraphQLRequestError(`no ${name} in the answer`);
      return payload;
    },
    ws,
  };
}
