/* eslint-disable */
import type { DocumentTypeDecoration } from '@graphql-typed-document-node/core';
export type Maybe<T> = T | null;
export type InputMaybe<T> = T | null | undefined;
export type Exact<T extends { [key: string]: unknown }> = { [K in keyof T]: T[K] };
export type MakeOptional<T, K extends keyof T> = Omit<T, K> & { [SubKey in K]?: Maybe<T[SubKey]> };
export type MakeMaybe<T, K extends keyof T> = Omit<T, K> & { [SubKey in K]: Maybe<T[SubKey]> };
export type MakeEmpty<T extends { [key: string]: unknown }, K extends keyof T> = { [_ in K]?: never };
export type Incremental<T> = T | { [P in keyof T]?: P extends ' $fragmentName' | '__typename' ? T[P] : never };
/** All built-in and custom scalars, mapped to their actual values */
export type Scalars = {
  ID: { input: string; output: string; }
  String: { input: string; output: string; }
  Boolean: { input: boolean; output: boolean; }
  Int: { input: number; output: number; }
  Float: { input: number; output: number; }
  /** A date and time in ISO 8601, in UTC. */
  DateTime: { input: string; output: string; }
  /** A revision: an integer below 2^53, sent as a JSON number. Larger is newer (R1). */
  Revision: { input: number; output: number; }
};

/** How a turn's failure is classified (A11), from the agent's error answer (its code and message) or its process's end, or a stall (A9). */
export type AgentErrorKind =
  /** The agent's process died or closed its connection; the next turn starts a fresh one. */
  | 'AGENT_EXITED'
  /** The agent has no credentials, or wrong ones: configure the profile (see `agents { auth }`). */
  | 'AUTHENTICATION'
  /** Any other error the agent answered. */
  | 'INTERNAL'
  /** The agent could not reach its model provider (network, DNS, the provider down). */
  | 'PROVIDER_UNREACHABLE'
  /** The model provider's rate limit or quota was reached. */
  | 'RATE_LIMIT'
  /** A9: the agent showed no activity (an update, a permission request, output) within its profile's `start_timeout` of the prompt or `stall_timeout` since the last; turnqueue killed it and the next turn starts a fresh one. */
  | 'STALLED';

/** What runs an agent profile's turns (A1). */
export type AgentType =
  /** A real coding agent over the Agent Client Protocol: one process per session, structured turn items, approvals (A2-A6). */
  | 'ACP'
  /** A command run once per turn; each printed line is output. */
  | 'COMMAND'
  /** The deterministic demo agent. */
  | 'SCRIPTED';

/** Input of answerApproval (A6). */
export type AnswerApprovalInput = {
  /** The pending approval (`Session.pendingApproval.id`). */
  approvalId: Scalars['ID']['input'];
  /** One of its options' `id`; any other is INVALID_INPUT. */
  optionId: Scalars['ID']['input'];
};

/** Input of answerClarification. */
export type AnswerClarificationInput = {
  /** The answer, sent to the agent as the next turn: not blank, no NUL character, at most `TURNQUEUE_MAX_CONTENT_BYTES` bytes of UTF-8 (default 100000). */
  answer: Scalars['String']['input'];
  /** The clarification being answered; when given and not the pending one, NO_CLARIFICATION (so a stale answer is not sent to a newer question). */
  clarificationId?: InputMaybe<Scalars['ID']['input']>;
  /** The session (one of the caller's; any other is NOT_FOUND). */
  sessionId: Scalars['ID']['input'];
};

/** Whether and how an approval was answered (A6). */
export type ApprovalOutcome =
  /** Answered `cancelled`: the turn was cancelled or ended first, or the profile's policy found no matching option. */
  | 'CANCELLED'
  /** Waiting for answerApproval; the queue is held (APPROVAL). */
  | 'PENDING'
  /** Answered with one of its options. */
  | 'SELECTED';

/** What an `acp` profile's agent last said about authentication (A11), on this instance. */
export type AuthState =
  /** `authenticate` with `method` succeeded. */
  | 'AUTHENTICATED'
  /** It started without an `authenticate` call (the profile provides no method's variables, or the agent needs none); it may still refuse a prompt. */
  | 'NOT_ASKED'
  /** It refused for want of authentication: `message` is its own words, `methods` what it offers. */
  | 'REFUSED'
  /** Its agent has not been started yet. */
  | 'UNKNOWN';

/** Input of cancel. */
export type CancelInput = {
  /** The session (one of the caller's; any other is NOT_FOUND). */
  sessionId: Scalars['ID']['input'];
};

/** How a cancel ended. */
export type CancelOutcome =
  /** The turn stopped only after SIGTERM or SIGKILL. */
  | 'ESCALATED'
  /** No turn was running: nothing changed, except that a pending clarification was withdrawn (C9). */
  | 'NOTHING_RUNNING'
  /** The turn stopped when asked (SIGINT for the command agent). */
  | 'STOPPED'
  /** The turn would not stop within the time bounds and its agent was abandoned (the turn still ends CANCELLED), or the instance running it did not answer. */
  | 'TIMED_OUT';

/** Input of clearQueue. */
export type ClearQueueInput = {
  /** The queue revision (`QueueStatus.revision`) the request assumes: when given and not current, nothing changes and the answer is QUEUE_CHANGED (Q13). */
  expectedRevision?: InputMaybe<Scalars['Revision']['input']>;
  /** The session (one of the caller's; any other is NOT_FOUND). */
  sessionId: Scalars['ID']['input'];
};

/** How a session's agent conversation was opened the last time its agent started (A8). */
export type ConversationStart =
  /** `session/load`: the agent reloaded its session; the history it replayed is in no turn. */
  | 'LOADED'
  /** `session/new`: the agent started a new session (the first start; or the agent offers neither resume nor load; or they failed: `resumeError`). */
  | 'NEW'
  /** `session/resume`: the agent continued its own session. */
  | 'RESUMED';

/** Input of createTask. */
export type CreateTaskInput = {
  /** The agent profile of its first session; null for the server's default (`TURNQUEUE_AGENT`). An unknown profile is INVALID_INPUT. */
  agent?: InputMaybe<Scalars['String']['input']>;
  /** The task's title: 1 to 500 characters. */
  title: Scalars['String']['input'];
};

/** How sendMessage delivers its message (Q16). */
export type Delivery =
  /** Start a turn when the session is free and nothing holds it; else queue it. */
  | 'AUTO'
  /** Offer it to the running turn (where the session's agent takes messages while it works: the scripted agent, ACP agents with the `_session/steering` extension); when the agent does not take it, or the turn ends first, it is queued at the tail as enqueueMessage would queue it. With no turn running, as AUTO. */
  | 'STEER';

/** Input of drain. */
export type DrainInput = {
  /** The queue revision (`QueueStatus.revision`) the request assumes: when given and not current, nothing changes and the answer is QUEUE_CHANGED (Q13). */
  expectedRevision?: InputMaybe<Scalars['Revision']['input']>;
  /** The session (one of the caller's; any other is NOT_FOUND). */
  sessionId: Scalars['ID']['input'];
};

/** Input of enqueueMessage. */
export type EnqueueMessageInput = {
  /** Q15: a key the client makes for this message (1 to 128 characters), so that a retry is safe: a second request of the same session with the same key answers the first one's outcome (the same turn or entry, never a second one), on any instance, after a restart, and when the two race; the same key with other content is IDEMPOTENCY_CONFLICT and changes nothing. Keys are kept at least 24 hours. The entry and the turn it becomes carry it (`clientMessageId`), so a client can match its optimistic row to the server's. */
  clientMessageId?: InputMaybe<Scalars['String']['input']>;
  /** The message: not blank, no NUL character, at most `TURNQUEUE_MAX_CONTENT_BYTES` bytes of UTF-8 (default 100000). */
  content: Scalars['String']['input'];
  /** The queue revision (`QueueStatus.revision`) the request assumes: when given and not current, nothing changes and the answer is QUEUE_CHANGED (Q13). */
  expectedRevision?: InputMaybe<Scalars['Revision']['input']>;
  /** The session (one of the caller's; any other is NOT_FOUND). */
  sessionId: Scalars['ID']['input'];
};

/** Why a mutation refused (`UserError.code`). A refused mutation changed nothing. */
export type ErrorCode =
  /** answerApproval: the approval was already answered (another answer won), or its turn was cancelled or has ended. */
  | 'APPROVAL_RESOLVED'
  /** The agent asked a question: answer it with answerClarification (or cancel to withdraw it) first. */
  | 'CLARIFICATION_PENDING'
  /** No such visible entry in this session's queue (it ran, was removed, or is being delivered). */
  | 'ENTRY_NOT_FOUND'
  /** sendMessage, enqueueMessage: this `clientMessageId` was already sent in this session with other content (Q15); nothing changed. */
  | 'IDEMPOTENCY_CONFLICT'
  /** An input is malformed or out of range: an id that is not a UUID, blank or oversized content, a title outside 1-500 characters, an unknown agent or workflow step, `entryId` used wrongly for the scope. `field` names it. */
  | 'INVALID_INPUT'
  /** Only USER entries can be edited (Q12). */
  | 'NOT_EDITABLE'
  /** No such session or task for the caller; one of another principal answers the same (S2). */
  | 'NOT_FOUND'
  /** No clarification is pending, or not the one `clarificationId` names. */
  | 'NO_CLARIFICATION'
  /** The queue is not as the request assumed: `expectedRevision` is not its current revision, `orderedIds` are not exactly its entries, or it changed under a sendNow (its entries were taken, or moved to the task's new session by a workflow step change). Read it again and retry. */
  | 'QUEUE_CHANGED'
  /** sendNow with scope ALL found no entries. */
  | 'QUEUE_EMPTY'
  /** The queue already holds its maximum of entries (Q11); the message gives the size and the limit. */
  | 'QUEUE_FULL'
  /** A cancel and a Send Now met on the same turn: cancel while a Send Now replaces it, or sendNow while a cancel runs (C3). */
  | 'SEND_NOW_CONFLICT'
  /** The session cannot do this now: a turn is running (drain), it cannot take a clarification's answer yet, or the instance running its turn did not answer. */
  | 'SESSION_BUSY'
  /** The session's state takes no prompts (CREATED, STARTING, FAILED or CANCELLED). */
  | 'SESSION_NOT_PROMPTABLE'
  /** sendNow: the active turn changed since the request was read; nothing was claimed. */
  | 'TURN_CHANGED';

/** What keeps a queue from delivering even with auto-run on (Q9). */
export type HoldReason =
  /** The agent waits for an answer to its permission request (A6). */
  | 'APPROVAL'
  /** A turn is running. */
  | 'BUSY'
  /** A cancellation is in progress. */
  | 'CANCELLING'
  /** The agent's question is not answered yet. */
  | 'CLARIFICATION'
  /** The session's state takes no prompts. */
  | 'NOT_PROMPTABLE'
  /** The task is moving to another workflow step. */
  | 'WORKFLOW_TRANSITION';

/** The kind of a turn item (A3). */
export type ItemKind =
  /** Text the agent wrote to the user (also in `Turn.output`). */
  | 'MESSAGE'
  /** The agent's plan (replaced by each new plan). */
  | 'PLAN'
  /** An agent update turnqueue does not interpret, kept as JSON. */
  | 'RAW'
  /** A message the user steered into the running turn (Q16). */
  | 'STEER'
  /** The agent's reasoning. */
  | 'THOUGHT'
  /** A tool call and its progress (updated in place). */
  | 'TOOL_CALL';

/** Where a prompt or a queued message came from. */
export type MessageSource =
  /** The agent itself. */
  | 'AGENT'
  /** The server's own automation. */
  | 'SERVER'
  /** A client: everything a client sends or enqueues. */
  | 'USER'
  /** A workflow action. */
  | 'WORKFLOW';

/** Input of moveTask. */
export type MoveTaskInput = {
  /** The workflow step to enter, by name; an unknown one is INVALID_INPUT. */
  step: Scalars['String']['input'];
  /** The task (one of the caller's). */
  taskId: Scalars['ID']['input'];
};

/** Why a queue's auto-run is off (Q14). */
export type PauseReason =
  /** A user's cancel with entries still queued parked the backlog (Q7). */
  | 'CANCEL'
  /** A workflow transfer from a session whose queue was paused (W3). */
  | 'TRANSFER'
  /** setAutoRun(autoRun: false). */
  | 'USER';

/** Input of removeQueueEntry. */
export type RemoveQueueEntryInput = {
  /** The entry to remove. */
  entryId: Scalars['ID']['input'];
  /** The queue revision (`QueueStatus.revision`) the request assumes: when given and not current, nothing changes and the answer is QUEUE_CHANGED (Q13). */
  expectedRevision?: InputMaybe<Scalars['Revision']['input']>;
  /** The session (one of the caller's; any other is NOT_FOUND). */
  sessionId: Scalars['ID']['input'];
};

/** Input of reorderQueue. */
export type ReorderQueueInput = {
  /** The queue revision (`QueueStatus.revision`) the request assumes: when given and not current, nothing changes and the answer is QUEUE_CHANGED (Q13). */
  expectedRevision?: InputMaybe<Scalars['Revision']['input']>;
  /** Every visible entry's id, each once, in the new order (head first); anything else is QUEUE_CHANGED. */
  orderedIds: Array<Scalars['ID']['input']>;
  /** The session (one of the caller's; any other is NOT_FOUND). */
  sessionId: Scalars['ID']['input'];
};

/** Input of sendMessage. */
export type SendMessageInput = {
  /** Q15: a key the client makes for this message (1 to 128 characters), so that a retry is safe: a second request of the same session with the same key answers the first one's outcome (the same turn or entry, never a second one), on any instance, after a restart, and when the two race; the same key with other content is IDEMPOTENCY_CONFLICT and changes nothing. Keys are kept at least 24 hours. The entry and the turn it becomes carry it (`clientMessageId`), so a client can match its optimistic row to the server's. */
  clientMessageId?: InputMaybe<Scalars['String']['input']>;
  /** The prompt: not blank, no NUL character, at most `TURNQUEUE_MAX_CONTENT_BYTES` bytes of UTF-8 (default 100000). */
  content: Scalars['String']['input'];
  /** How to deliver it (Q16): AUTO (start or queue) or STEER (offer it to the running turn first). The answer's `outcome` says what happened. */
  delivery?: Delivery;
  /** The session (one of the caller's; any other is NOT_FOUND). */
  sessionId: Scalars['ID']['input'];
};

/** Input of sendNow. */
export type SendNowInput = {
  /** The entry to run: required with scope ENTRY, absent with ALL (else INVALID_INPUT). */
  entryId?: InputMaybe<Scalars['ID']['input']>;
  /** The queue revision (`QueueStatus.revision`) the request assumes: when given and not current, nothing changes and the answer is QUEUE_CHANGED (Q13). */
  expectedRevision?: InputMaybe<Scalars['Revision']['input']>;
  /** One entry (default) or all of them combined. */
  scope?: SendNowScope;
  /** The session (one of the caller's; any other is NOT_FOUND). */
  sessionId: Scalars['ID']['input'];
};

/** What sendNow runs in place of the active turn (Q5). */
export type SendNowScope =
  /** Every entry, combined in FIFO order into one prompt joined by blank lines (for compatibility; takes no `entryId`). */
  | 'ALL'
  /** The one entry named by `entryId`. */
  | 'ENTRY';

/** What a send did (Q16). */
export type SendOutcome =
  /** It waits in the queue (`queuedEntry`). */
  | 'QUEUED'
  /** It started a turn (at once, or from the queue before it could be steered: `turn`). */
  | 'STARTED'
  /** The running turn took it (`turn`; a STEER item of that turn). */
  | 'STEERED';

/** Where a session is in its life. Promptable: WAITING_FOR_INPUT and COMPLETED. */
export type SessionState =
  /** The session was closed. Not promptable. */
  | 'CANCELLED'
  /** Its task reached the workflow's last step, or a transfer replaced it (W3). Still promptable: a prompt reopens it. */
  | 'COMPLETED'
  /** Just created; its agent is not being prepared yet. */
  | 'CREATED'
  /** Its agent could not be started. Not promptable. */
  | 'FAILED'
  /** A turn is running (busy): a message sent now is queued. */
  | 'RUNNING'
  /** Its agent is getting ready. */
  | 'STARTING'
  /** Ready for a prompt. Every turn end (completed, failed, cancelled, or a clarification asked) comes back here. */
  | 'WAITING_FOR_INPUT';

/** Input of setAutoRun. */
export type SetAutoRunInput = {
  /** true: run on by itself (and start the head now if nothing holds it); false: hold the queue after the current turn (pause reason USER). */
  autoRun: Scalars['Boolean']['input'];
  /** The queue revision (`QueueStatus.revision`) the request assumes: when given and not current, nothing changes and the answer is QUEUE_CHANGED (Q13). */
  expectedRevision?: InputMaybe<Scalars['Revision']['input']>;
  /** The session (one of the caller's; any other is NOT_FOUND). */
  sessionId: Scalars['ID']['input'];
};

/** How far a turn got. */
export type TurnStatus =
  /** Stopped by a cancel or a Send Now replacement; also any end while a cancellation was pending (C8). */
  | 'CANCELLED'
  /** The agent finished (also when it asked a clarification). */
  | 'COMPLETED'
  /** The agent failed, or the turn was interrupted because its server died (M6); `error` says why. */
  | 'FAILED'
  /** The agent is answering. */
  | 'RUNNING';

/** Input of updateQueueEntry. */
export type UpdateQueueEntryInput = {
  /** Its new content: not blank, no NUL character, at most `TURNQUEUE_MAX_CONTENT_BYTES` bytes of UTF-8 (default 100000). */
  content: Scalars['String']['input'];
  /** The entry to edit (a USER entry). */
  entryId: Scalars['ID']['input'];
  /** The queue revision (`QueueStatus.revision`) the request assumes: when given and not current, nothing changes and the answer is QUEUE_CHANGED (Q13). */
  expectedRevision?: InputMaybe<Scalars['Revision']['input']>;
  /** The session (one of the caller's; any other is NOT_FOUND). */
  sessionId: Scalars['ID']['input'];
};

export type QueueFragment = { id: string, sessionId: string, autoRun: boolean, pauseReason: PauseReason | null, heldBy: Array<HoldReason>, count: number, max: number | null, revision: number, entries: Array<{ id: string, position: number, content: string, source: MessageSource, clientMessageId: string | null }> };

export type CancellationFragment = { id: string, sessionId: string, pending: boolean, revision: number };

export type TurnFieldsFragment = { id: string, prompt: string, source: MessageSource, status: TurnStatus, output: string, error: string | null, startedAt: string, endedAt: string | null, clientMessageId: string | null };

type ItemFields_MessageItem_Fragment = { __typename: 'MessageItem', text: string, index: number };

type ItemFields_PlanItem_Fragment = { __typename: 'PlanItem', index: number, entries: Array<{ content: string, priority: string, status: string }> };

type ItemFields_RawItem_Fragment = { __typename: 'RawItem', json: string, index: number };

type ItemFields_SteerItem_Fragment = { __typename: 'SteerItem', text: string, entryId: string, index: number };

type ItemFields_ThoughtItem_Fragment = { __typename: 'ThoughtItem', text: string, index: number };

type ItemFields_ToolCallItem_Fragment = { __typename: 'ToolCallItem', toolCallId: string, title: string, toolKind: string, status: string, text: string, index: number, locations: Array<{ path: string, line: number | null }> };

export type ItemFieldsFragment =
  | ItemFields_MessageItem_Fragment
  | ItemFields_PlanItem_Fragment
  | ItemFields_RawItem_Fragment
  | ItemFields_SteerItem_Fragment
  | ItemFields_ThoughtItem_Fragment
  | ItemFields_ToolCallItem_Fragment
;

export type SessionCoreFragment = { id: string, taskId: string, agent: string, state: SessionState, revision: number, promptable: boolean, agentError: string | null, agentConversation: { resumed: ConversationStart, resumeError: string | null } | null, clarification: { id: string, question: string } | null, pendingApproval: { id: string, title: string, toolCallId: string | null, options: Array<{ id: string, name: string, kind: string }> } | null, currentTurn: { id: string, prompt: string, source: MessageSource, status: TurnStatus, output: string, error: string | null, startedAt: string, endedAt: string | null, clientMessageId: string | null } | null, turnsConnection: { edges: Array<{ node: { id: string, prompt: string, source: MessageSource, status: TurnStatus, output: string, error: string | null, startedAt: string, endedAt: string | null, clientMessageId: string | null } }> }, task: { id: string, title: string, workflowStep: string, currentSession: { id: string } | null } };

export type SessionSnapshotQueryVariables = Exact<{
  id: Scalars['ID']['input'];
}>;


export type SessionSnapshotQuery = { session: { id: string, taskId: string, agent: string, state: SessionState, revision: number, promptable: boolean, agentError: string | null, queue: { id: string, sessionId: string, autoRun: boolean, pauseReason: PauseReason | null, heldBy: Array<HoldReason>, count: number, max: number | null, revision: number, entries: Array<{ id: string, position: number, content: string, source: MessageSource, clientMessageId: string | null }> }, cancellation: { id: string, sessionId: string, pending: boolean, revision: number }, agentConversation: { resumed: ConversationStart, resumeError: string | null } | null, clarification: { id: string, question: string } | null, pendingApproval: { id: string, title: string, toolCallId: string | null, options: Array<{ id: string, name: string, kind: string }> } | null, currentTurn: { id: string, prompt: string, source: MessageSource, status: TurnStatus, output: string, error: string | null, startedAt: string, endedAt: string | null, clientMessageId: string | null } | null, turnsConnection: { edges: Array<{ node: { id: string, prompt: string, source: MessageSource, status: TurnStatus, output: string, error: string | null, startedAt: string, endedAt: string | null, clientMessageId: string | null } }> }, task: { id: string, title: string, workflowStep: string, currentSession: { id: string } | null } } | null };

export type TasksQueryVariables = Exact<{
  after?: InputMaybe<Scalars['String']['input']>;
}>;


export type TasksQuery = { tasksConnection: { edges: Array<{ node: { id: string, title: string, workflowStep: string, createdAt: string, currentSession: { id: string, state: SessionState, agent: string } | null } }>, pageInfo: { hasNextPage: boolean, endCursor: string | null } } };

export type AgentsQueryVariables = Exact<{ [key: string]: never; }>;


export type AgentsQuery = { agents: Array<{ name: string, type: AgentType, steering: boolean }> };

export type QueueStatusChangedSubscriptionVariables = Exact<{
  sessionId: Scalars['ID']['input'];
}>;


export type QueueStatusChangedSubscription = { queueStatusChanged: { id: string, sessionId: string, autoRun: boolean, pauseReason: PauseReason | null, heldBy: Array<HoldReason>, count: number, max: number | null, revision: number, entries: Array<{ id: string, position: number, content: string, source: MessageSource, clientMessageId: string | null }> } };

export type CancellationChangedSubscriptionVariables = Exact<{
  sessionId: Scalars['ID']['input'];
}>;


export type CancellationChangedSubscription = { cancellationChanged: { id: string, sessionId: string, pending: boolean, revision: number } };

export type SessionChangedSubscriptionVariables = Exact<{
  sessionId: Scalars['ID']['input'];
}>;


export type SessionChangedSubscription = { sessionChanged: { id: string, taskId: string, agent: string, state: SessionState, revision: number, promptable: boolean, agentError: string | null, cancellation: { id: string, sessionId: string, pending: boolean, revision: number }, agentConversation: { resumed: ConversationStart, resumeError: string | null } | null, clarification: { id: string, question: string } | null, pendingApproval: { id: string, title: string, toolCallId: string | null, options: Array<{ id: string, name: string, kind: string }> } | null, currentTurn: { id: string, prompt: string, source: MessageSource, status: TurnStatus, output: string, error: string | null, startedAt: string, endedAt: string | null, clientMessageId: string | null } | null, turnsConnection: { edges: Array<{ node: { id: string, prompt: string, source: MessageSource, status: TurnStatus, output: string, error: string | null, startedAt: string, endedAt: string | null, clientMessageId: string | null } }> }, task: { id: string, title: string, workflowStep: string, currentSession: { id: string } | null } } };

export type TurnOutputSubscriptionVariables = Exact<{
  sessionId: Scalars['ID']['input'];
  turnId?: InputMaybe<Scalars['ID']['input']>;
  afterOffset?: InputMaybe<Scalars['Int']['input']>;
}>;


export type TurnOutputSubscription = { turnOutput: { sessionId: string, turnId: string, offset: number, text: string, done: boolean, status: TurnStatus } };

export type TurnItemsSubscriptionVariables = Exact<{
  sessionId: Scalars['ID']['input'];
  turnId?: InputMaybe<Scalars['ID']['input']>;
  afterOffset?: InputMaybe<Scalars['Int']['input']>;
}>;


export type TurnItemsSubscription = { turnItems: { sessionId: string, turnId: string, offset: number, nextOffset: number, done: boolean, status: TurnStatus, items: Array<
      | { __typename: 'MessageItem', text: string, index: number }
      | { __typename: 'PlanItem', index: number, entries: Array<{ content: string, priority: string, status: string }> }
      | { __typename: 'RawItem', json: string, index: number }
      | { __typename: 'SteerItem', text: string, entryId: string, index: number }
      | { __typename: 'ThoughtItem', text: string, index: number }
      | { __typename: 'ToolCallItem', toolCallId: string, title: string, toolKind: string, status: string, text: string, index: number, locations: Array<{ path: string, line: number | null }> }
    > } };

export type CreateTaskMutationVariables = Exact<{
  input: CreateTaskInput;
}>;


export type CreateTaskMutation = { createTask: { task: { id: string } | null, session: { id: string } | null, userErrors: Array<{ code: ErrorCode, message: string }> } };

export type SendMessageMutationVariables = Exact<{
  input: SendMessageInput;
}>;


export type SendMessageMutation = { sendMessage: { outcome: SendOutcome | null, queue: { id: string, sessionId: string, autoRun: boolean, pauseReason: PauseReason | null, heldBy: Array<HoldReason>, count: number, max: number | null, revision: number, entries: Array<{ id: string, position: number, content: string, source: MessageSource, clientMessageId: string | null }> } | null, turn: { id: string, clientMessageId: string | null } | null, queuedEntry: { id: string, clientMessageId: string | null } | null, userErrors: Array<{ code: ErrorCode, message: string }> } };

export type EnqueueMessageMutationVariables = Exact<{
  input: EnqueueMessageInput;
}>;


export type EnqueueMessageMutation = { enqueueMessage: { dispatched: boolean, queue: { id: string, sessionId: string, autoRun: boolean, pauseReason: PauseReason | null, heldBy: Array<HoldReason>, count: number, max: number | null, revision: number, entries: Array<{ id: string, position: number, content: string, source: MessageSource, clientMessageId: string | null }> } | null, entry: { id: string, clientMessageId: string | null } | null, userErrors: Array<{ code: ErrorCode, message: string }> } };

export type UpdateQueueEntryMutationVariables = Exact<{
  input: UpdateQueueEntryInput;
}>;


export type UpdateQueueEntryMutation = { updateQueueEntry: { queue: { id: string, sessionId: string, autoRun: boolean, pauseReason: PauseReason | null, heldBy: Array<HoldReason>, count: number, max: number | null, revision: number, entries: Array<{ id: string, position: number, content: string, source: MessageSource, clientMessageId: string | null }> } | null, userErrors: Array<{ code: ErrorCode, message: string }> } };

export type RemoveQueueEntryMutationVariables = Exact<{
  input: RemoveQueueEntryInput;
}>;


export type RemoveQueueEntryMutation = { removeQueueEntry: { queue: { id: string, sessionId: string, autoRun: boolean, pauseReason: PauseReason | null, heldBy: Array<HoldReason>, count: number, max: number | null, revision: number, entries: Array<{ id: string, position: number, content: string, source: MessageSource, clientMessageId: string | null }> } | null, userErrors: Array<{ code: ErrorCode, message: string }> } };

export type ReorderQueueMutationVariables = Exact<{
  input: ReorderQueueInput;
}>;


export type ReorderQueueMutation = { reorderQueue: { queue: { id: string, sessionId: string, autoRun: boolean, pauseReason: PauseReason | null, heldBy: Array<HoldReason>, count: number, max: number | null, revision: number, entries: Array<{ id: string, position: number, content: string, source: MessageSource, clientMessageId: string | null }> } | null, userErrors: Array<{ code: ErrorCode, message: string }> } };

export type SetAutoRunMutationVariables = Exact<{
  input: SetAutoRunInput;
}>;


export type SetAutoRunMutation = { setAutoRun: { dispatched: boolean, queue: { id: string, sessionId: string, autoRun: boolean, pauseReason: PauseReason | null, heldBy: Array<HoldReason>, count: number, max: number | null, revision: number, entries: Array<{ id: string, position: number, content: string, source: MessageSource, clientMessageId: string | null }> } | null, userErrors: Array<{ code: ErrorCode, message: string }> } };

export type SendNowMutationVariables = Exact<{
  input: SendNowInput;
}>;


export type SendNowMutation = { sendNow: { sentCount: number, queue: { id: string, sessionId: string, autoRun: boolean, pauseReason: PauseReason | null, heldBy: Array<HoldReason>, count: number, max: number | null, revision: number, entries: Array<{ id: string, position: number, content: string, source: MessageSource, clientMessageId: string | null }> } | null, userErrors: Array<{ code: ErrorCode, message: string }> } };

export type AnswerClarificationMutationVariables = Exact<{
  input: AnswerClarificationInput;
}>;


export type AnswerClarificationMutation = { answerClarification: { session: { id: string } | null, userErrors: Array<{ code: ErrorCode, message: string }> } };

export type AnswerApprovalMutationVariables = Exact<{
  input: AnswerApprovalInput;
}>;


export type AnswerApprovalMutation = { answerApproval: { approval: { id: string } | null, session: { id: string } | null, userErrors: Array<{ code: ErrorCode, message: string }> } };

export type CancelMutationVariables = Exact<{
  input: CancelInput;
}>;


export type CancelMutation = { cancel: { outcome: CancelOutcome | null, cancellation: { id: string, sessionId: string, pending: boolean, revision: number } | null, userErrors: Array<{ code: ErrorCode, message: string }> } };

export class TypedDocumentString<TResult, TVariables>
  extends String
  implements DocumentTypeDecoration<TResult, TVariables>
{
  __apiType?: NonNullable<DocumentTypeDecoration<TResult, TVariables>['__apiType']>;
  private value: string;
  public __meta__?: Record<string, any> | undefined;

  constructor(value: string, __meta__?: Record<string, any> | undefined) {
    super(value);
    this.value = value;
    this.__meta__ = __meta__;
  }

  override toString(): string & DocumentTypeDecoration<TResult, TVariables> {
    return this.value;
  }
}
export const QueueFragmentDoc = new TypedDocumentString(`
    fragment Queue on QueueStatus {
  id
  sessionId
  autoRun
  pauseReason
  heldBy
  count
  max
  revision
  entries {
    id
    position
    content
    source
    clientMessageId
  }
}
    `, {"fragmentName":"Queue"}) as unknown as TypedDocumentString<QueueFragment, unknown>;
export const CancellationFragmentDoc = new TypedDocumentString(`
    fragment Cancellation on CancellationStatus {
  id
  sessionId
  pending
  revision
}
    `, {"fragmentName":"Cancellation"}) as unknown as TypedDocumentString<CancellationFragment, unknown>;
export const ItemFieldsFragmentDoc = new TypedDocumentString(`
    fragment ItemFields on TurnItem {
  __typename
  index
  ... on MessageItem {
    text
  }
  ... on ThoughtItem {
    text
  }
  ... on ToolCallItem {
    toolCallId
    title
    toolKind
    status
    text
    locations {
      path
      line
    }
  }
  ... on PlanItem {
    entries {
      content
      priority
      status
    }
  }
  ... on RawItem {
    json
  }
  ... on SteerItem {
    text
    entryId
  }
}
    `, {"fragmentName":"ItemFields"}) as unknown as TypedDocumentString<ItemFieldsFragment, unknown>;
export const TurnFieldsFragmentDoc = new TypedDocumentString(`
    fragment TurnFields on Turn {
  id
  prompt
  source
  status
  output
  error
  startedAt
  endedAt
  clientMessageId
}
    `, {"fragmentName":"TurnFields"}) as unknown as TypedDocumentString<TurnFieldsFragment, unknown>;
export const SessionCoreFragmentDoc = new TypedDocumentString(`
    fragment SessionCore on Session {
  id
  taskId
  agent
  state
  revision
  promptable
  agentError
  agentConversation {
    resumed
    resumeError
  }
  clarification {
    id
    question
  }
  pendingApproval {
    id
    title
    toolCallId
    options {
      id
      name
      kind
    }
  }
  currentTurn {
    ...TurnFields
  }
  turnsConnection(last: 20) {
    edges {
      node {
        ...TurnFields
      }
    }
  }
  task {
    id
    title
    workflowStep
    currentSession {
      id
    }
  }
}
    fragment TurnFields on Turn {
  id
  prompt
  source
  status
  output
  error
  startedAt
  endedAt
  clientMessageId
}`, {"fragmentName":"SessionCore"}) as unknown as TypedDocumentString<SessionCoreFragment, unknown>;
export const SessionSnapshotDocument = new TypedDocumentString(`
    query SessionSnapshot($id: ID!) {
  session(id: $id) {
    ...SessionCore
    queue {
      ...Queue
    }
    cancellation {
      ...Cancellation
    }
  }
}
    fragment Queue on QueueStatus {
  id
  sessionId
  autoRun
  pauseReason
  heldBy
  count
  max
  revision
  entries {
    id
    position
    content
    source
    clientMessageId
  }
}
fragment Cancellation on CancellationStatus {
  id
  sessionId
  pending
  revision
}
fragment TurnFields on Turn {
  id
  prompt
  source
  status
  output
  error
  startedAt
  endedAt
  clientMessageId
}
fragment SessionCore on Session {
  id
  taskId
  agent
  state
  revision
  promptable
  agentError
  agentConversation {
    resumed
    resumeError
  }
  clarification {
    id
    question
  }
  pendingApproval {
    id
    title
    toolCallId
    options {
      id
      name
      kind
    }
  }
  currentTurn {
    ...TurnFields
  }
  turnsConnection(last: 20) {
    edges {
      node {
        ...TurnFields
      }
    }
  }
  task {
    id
    title
    workflowStep
    currentSession {
      id
    }
  }
}`) as unknown as TypedDocumentString<SessionSnapshotQuery, SessionSnapshotQueryVariables>;
export const TasksDocument = new TypedDocumentString(`
    query Tasks($after: String) {
  tasksConnection(first: 30, after: $after) {
    edges {
      node {
        id
        title
        workflowStep
        createdAt
        currentSession {
          id
          state
          agent
        }
      }
    }
    pageInfo {
      hasNextPage
      endCursor
    }
  }
}
    `) as unknown as TypedDocumentString<TasksQuery, TasksQueryVariables>;
export const AgentsDocument = new TypedDocumentString(`
    query Agents {
  agents {
    name
    type
    steering
  }
}
    `) as unknown as TypedDocumentString<AgentsQuery, AgentsQueryVariables>;
export const QueueStatusChangedDocument = new TypedDocumentString(`
    subscription QueueStatusChanged($sessionId: ID!) {
  queueStatusChanged(sessionId: $sessionId) {
    ...Queue
  }
}
    fragment Queue on QueueStatus {
  id
  sessionId
  autoRun
  pauseReason
  heldBy
  count
  max
  revision
  entries {
    id
    position
    content
    source
    clientMessageId
  }
}`) as unknown as TypedDocumentString<QueueStatusChangedSubscription, QueueStatusChangedSubscriptionVariables>;
export const CancellationChangedDocument = new TypedDocumentString(`
    subscription CancellationChanged($sessionId: ID!) {
  cancellationChanged(sessionId: $sessionId) {
    ...Cancellation
  }
}
    fragment Cancellation on CancellationStatus {
  id
  sessionId
  pending
  revision
}`) as unknown as TypedDocumentString<CancellationChangedSubscription, CancellationChangedSubscriptionVariables>;
export const SessionChangedDocument = new TypedDocumentString(`
    subscription SessionChanged($sessionId: ID!) {
  sessionChanged(sessionId: $sessionId) {
    ...SessionCore
    cancellation {
      ...Cancellation
    }
  }
}
    fragment Cancellation on CancellationStatus {
  id
  sessionId
  pending
  revision
}
fragment TurnFields on Turn {
  id
  prompt
  source
  status
  output
  error
  startedAt
  endedAt
  clientMessageId
}
fragment SessionCore on Session {
  id
  taskId
  agent
  state
  revision
  promptable
  agentError
  agentConversation {
    resumed
    resumeError
  }
  clarification {
    id
    question
  }
  pendingApproval {
    id
    title
    toolCallId
    options {
      id
      name
      kind
    }
  }
  currentTurn {
    ...TurnFields
  }
  turnsConnection(last: 20) {
    edges {
      node {
        ...TurnFields
      }
    }
  }
  task {
    id
    title
    workflowStep
    currentSession {
      id
    }
  }
}`) as unknown as TypedDocumentString<SessionChangedSubscription, SessionChangedSubscriptionVariables>;
export const TurnOutputDocument = new TypedDocumentString(`
    subscription TurnOutput($sessionId: ID!, $turnId: ID, $afterOffset: Int) {
  turnOutput(sessionId: $sessionId, turnId: $turnId, afterOffset: $afterOffset) {
    sessionId
    turnId
    offset
    text
    done
    status
  }
}
    `) as unknown as TypedDocumentString<TurnOutputSubscription, TurnOutputSubscriptionVariables>;
export const TurnItemsDocument = new TypedDocumentString(`
    subscription TurnItems($sessionId: ID!, $turnId: ID, $afterOffset: Int) {
  turnItems(sessionId: $sessionId, turnId: $turnId, afterOffset: $afterOffset) {
    sessionId
    turnId
    offset
    nextOffset
    done
    status
    items {
      ...ItemFields
    }
  }
}
    fragment ItemFields on TurnItem {
  __typename
  index
  ... on MessageItem {
    text
  }
  ... on ThoughtItem {
    text
  }
  ... on ToolCallItem {
    toolCallId
    title
    toolKind
    status
    text
    locations {
      path
      line
    }
  }
  ... on PlanItem {
    entries {
      content
      priority
      status
    }
  }
  ... on RawItem {
    json
  }
  ... on SteerItem {
    text
    entryId
  }
}`) as unknown as TypedDocumentString<TurnItemsSubscription, TurnItemsSubscriptionVariables>;
export const CreateTaskDocument = new TypedDocumentString(`
    mutation CreateTask($input: CreateTaskInput!) {
  createTask(input: $input) {
    task {
      id
    }
    session {
      id
    }
    userErrors {
      code
      message
    }
  }
}
    `) as unknown as TypedDocumentString<CreateTaskMutation, CreateTaskMutationVariables>;
export const SendMessageDocument = new TypedDocumentString(`
    mutation SendMessage($input: SendMessageInput!) {
  sendMessage(input: $input) {
    queue {
      ...Queue
    }
    turn {
      id
      clientMessageId
    }
    queuedEntry {
      id
      clientMessageId
    }
    outcome
    userErrors {
      code
      message
    }
  }
}
    fragment Queue on QueueStatus {
  id
  sessionId
  autoRun
  pauseReason
  heldBy
  count
  max
  revision
  entries {
    id
    position
    content
    source
    clientMessageId
  }
}`) as unknown as TypedDocumentString<SendMessageMutation, SendMessageMutationVariables>;
export const EnqueueMessageDocument = new TypedDocumentString(`
    mutation EnqueueMessage($input: EnqueueMessageInput!) {
  enqueueMessage(input: $input) {
    queue {
      ...Queue
    }
    entry {
      id
      clientMessageId
    }
    dispatched
    userErrors {
      code
      message
    }
  }
}
    fragment Queue on QueueStatus {
  id
  sessionId
  autoRun
  pauseReason
  heldBy
  count
  max
  revision
  entries {
    id
    position
    content
    source
    clientMessageId
  }
}`) as unknown as TypedDocumentString<EnqueueMessageMutation, EnqueueMessageMutationVariables>;
export const UpdateQueueEntryDocument = new TypedDocumentString(`
    mutation UpdateQueueEntry($input: UpdateQueueEntryInput!) {
  updateQueueEntry(input: $input) {
    queue {
      ...Queue
    }
    userErrors {
      code
      message
    }
  }
}
    fragment Queue on QueueStatus {
  id
  sessionId
  autoRun
  pauseReason
  heldBy
  count
  max
  revision
  entries {
    id
    position
    content
    source
    clientMessageId
  }
}`) as unknown as TypedDocumentString<UpdateQueueEntryMutation, UpdateQueueEntryMutationVariables>;
export const RemoveQueueEntryDocument = new TypedDocumentString(`
    mutation RemoveQueueEntry($input: RemoveQueueEntryInput!) {
  removeQueueEntry(input: $input) {
    queue {
      ...Queue
    }
    userErrors {
      code
      message
    }
  }
}
    fragment Queue on QueueStatus {
  id
  sessionId
  autoRun
  pauseReason
  heldBy
  count
  max
  revision
  entries {
    id
    position
    content
    source
    clientMessageId
  }
}`) as unknown as TypedDocumentString<RemoveQueueEntryMutation, RemoveQueueEntryMutationVariables>;
export const ReorderQueueDocument = new TypedDocumentString(`
    mutation ReorderQueue($input: ReorderQueueInput!) {
  reorderQueue(input: $input) {
    queue {
      ...Queue
    }
    userErrors {
      code
      message
    }
  }
}
    fragment Queue on QueueStatus {
  id
  sessionId
  autoRun
  pauseReason
  heldBy
  count
  max
  revision
  entries {
    id
    position
    content
    source
    clientMessageId
  }
}`) as unknown as TypedDocumentString<ReorderQueueMutation, ReorderQueueMutationVariables>;
export const SetAutoRunDocument = new TypedDocumentString(`
    mutation SetAutoRun($input: SetAutoRunInput!) {
  setAutoRun(input: $input) {
    queue {
      ...Queue
    }
    dispatched
    userErrors {
      code
      message
    }
  }
}
    fragment Queue on QueueStatus {
  id
  sessionId
  autoRun
  pauseReason
  heldBy
  count
  max
  revision
  entries {
    id
    position
    content
    source
    clientMessageId
  }
}`) as unknown as TypedDocumentString<SetAutoRunMutation, SetAutoRunMutationVariables>;
export const SendNowDocument = new TypedDocumentString(`
    mutation SendNow($input: SendNowInput!) {
  sendNow(input: $input) {
    queue {
      ...Queue
    }
    sentCount
    userErrors {
      code
      message
    }
  }
}
    fragment Queue on QueueStatus {
  id
  sessionId
  autoRun
  pauseReason
  heldBy
  count
  max
  revision
  entries {
    id
    position
    content
    source
    clientMessageId
  }
}`) as unknown as TypedDocumentString<SendNowMutation, SendNowMutationVariables>;
export const AnswerClarificationDocument = new TypedDocumentString(`
    mutation AnswerClarification($input: AnswerClarificationInput!) {
  answerClarification(input: $input) {
    session {
      id
    }
    userErrors {
      code
      message
    }
  }
}
    `) as unknown as TypedDocumentString<AnswerClarificationMutation, AnswerClarificationMutationVariables>;
export const AnswerApprovalDocument = new TypedDocumentString(`
    mutation AnswerApproval($input: AnswerApprovalInput!) {
  answerApproval(input: $input) {
    approval {
      id
    }
    session {
      id
    }
    userErrors {
      code
      message
    }
  }
}
    `) as unknown as TypedDocumentString<AnswerApprovalMutation, AnswerApprovalMutationVariables>;
export const CancelDocument = new TypedDocumentString(`
    mutation Cancel($input: CancelInput!) {
  cancel(input: $input) {
    cancellation {
      ...Cancellation
    }
    outcome
    userErrors {
      code
      message
    }
  }
}
    fragment Cancellation on CancellationStatus {
  id
  sessionId
  pending
  revision
}`) as unknown as TypedDocumentString<CancelMutation, CancelMutationVariables>;