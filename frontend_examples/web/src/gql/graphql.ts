/* eslint-disable */
/** Internal type. DO NOT USE DIRECTLY. */
type Exact<T extends { [key: string]: unknown }> = { [K in keyof T]: T[K] };
/** Internal type. DO NOT USE DIRECTLY. */
export type Incremental<T> = T | { [P in keyof T]?: P extends ' $fragmentName' | '__typename' ? T[P] : never };
import type { DocumentTypeDecoration } from '@graphql-typed-document-node/core';
export type CancelInput = {
  sessionId: string;
};

export type CancelOutcome =
  | 'ESCALATED'
  | 'NOTHING_RUNNING'
  | 'STOPPED'
  | 'TIMED_OUT';

export type CreateTaskInput = {
  agent?: string | null | undefined;
  title: string;
};

export type EnqueueMessageInput = {
  content: string;
  expectedRevision?: number | null | undefined;
  sessionId: string;
};

export type ErrorCode =
  | 'CLARIFICATION_PENDING'
  | 'ENTRY_NOT_FOUND'
  | 'INVALID_INPUT'
  | 'NOT_EDITABLE'
  | 'NOT_FOUND'
  | 'NO_CLARIFICATION'
  | 'QUEUE_CHANGED'
  | 'QUEUE_EMPTY'
  | 'QUEUE_FULL'
  | 'SEND_NOW_CONFLICT'
  | 'SESSION_BUSY'
  | 'SESSION_NOT_PROMPTABLE'
  | 'TURN_CHANGED';

export type HoldReason =
  | 'BUSY'
  | 'CANCELLING'
  | 'CLARIFICATION'
  | 'NOT_PROMPTABLE'
  | 'WORKFLOW_TRANSITION';

export type MessageSource =
  | 'AGENT'
  | 'SERVER'
  | 'USER'
  | 'WORKFLOW';

export type PauseReason =
  | 'CANCEL'
  | 'TRANSFER'
  | 'USER';

export type RemoveQueueEntryInput = {
  entryId: string;
  expectedRevision?: number | null | undefined;
  sessionId: string;
};

export type ReorderQueueInput = {
  expectedRevision?: number | null | undefined;
  orderedIds: Array<string>;
  sessionId: string;
};

export type SendMessageInput = {
  content: string;
  sessionId: string;
};

export type SendNowInput = {
  entryId?: string | null | undefined;
  expectedRevision?: number | null | undefined;
  scope?: SendNowScope;
  sessionId: string;
};

export type SendNowScope =
  | 'ALL'
  | 'ENTRY';

export type SessionState =
  | 'CANCELLED'
  | 'COMPLETED'
  | 'CREATED'
  | 'FAILED'
  | 'RUNNING'
  | 'STARTING'
  | 'WAITING_FOR_INPUT';

export type SetAutoRunInput = {
  autoRun: boolean;
  expectedRevision?: number | null | undefined;
  sessionId: string;
};

export type TurnStatus =
  | 'CANCELLED'
  | 'COMPLETED'
  | 'FAILED'
  | 'RUNNING';

export type UpdateQueueEntryInput = {
  content: string;
  entryId: string;
  expectedRevision?: number | null | undefined;
  sessionId: string;
};

export type QueueFragment = { id: string, sessionId: string, autoRun: boolean, pauseReason: PauseReason | null, heldBy: Array<HoldReason>, count: number, max: number | null, revision: number, entries: Array<{ id: string, position: number, content: string, source: MessageSource }> };

export type CancellationFragment = { id: string, sessionId: string, pending: boolean, revision: number };

export type TurnFieldsFragment = { id: string, prompt: string, source: MessageSource, status: TurnStatus, output: string, error: string | null };

export type SessionCoreFragment = { id: string, taskId: string, agent: string, state: SessionState, revision: number, promptable: boolean, clarification: { id: string, question: string } | null, currentTurn: { id: string, prompt: string, source: MessageSource, status: TurnStatus, output: string, error: string | null } | null, turns: Array<{ id: string, prompt: string, source: MessageSource, status: TurnStatus, output: string, error: string | null }>, task: { id: string, title: string, workflowStep: string } };

export type SessionSnapshotQueryVariables = Exact<{
  id: string;
}>;


export type SessionSnapshotQuery = { session: { id: string, taskId: string, agent: string, state: SessionState, revision: number, promptable: boolean, queue: { id: string, sessionId: string, autoRun: boolean, pauseReason: PauseReason | null, heldBy: Array<HoldReason>, count: number, max: number | null, revision: number, entries: Array<{ id: string, position: number, content: string, source: MessageSource }> }, cancellation: { id: string, sessionId: string, pending: boolean, revision: number }, clarification: { id: string, question: string } | null, currentTurn: { id: string, prompt: string, source: MessageSource, status: TurnStatus, output: string, error: string | null } | null, turns: Array<{ id: string, prompt: string, source: MessageSource, status: TurnStatus, output: string, error: string | null }>, task: { id: string, title: string, workflowStep: string } } | null };

export type TasksQueryVariables = Exact<{ [key: string]: never; }>;


export type TasksQuery = { tasks: Array<{ id: string, title: string, workflowStep: string, currentSession: { id: string, state: SessionState } | null }> };

export type QueueStatusChangedSubscriptionVariables = Exact<{
  sessionId: string;
}>;


export type QueueStatusChangedSubscription = { queueStatusChanged: { id: string, sessionId: string, autoRun: boolean, pauseReason: PauseReason | null, heldBy: Array<HoldReason>, count: number, max: number | null, revision: number, entries: Array<{ id: string, position: number, content: string, source: MessageSource }> } };

export type CancellationChangedSubscriptionVariables = Exact<{
  sessionId: string;
}>;


export type CancellationChangedSubscription = { cancellationChanged: { id: string, sessionId: string, pending: boolean, revision: number } };

export type SessionChangedSubscriptionVariables = Exact<{
  sessionId: string;
}>;


export type SessionChangedSubscription = { sessionChanged: { id: string, taskId: string, agent: string, state: SessionState, revision: number, promptable: boolean, cancellation: { id: string, sessionId: string, pending: boolean, revision: number }, clarification: { id: string, question: string } | null, currentTurn: { id: string, prompt: string, source: MessageSource, status: TurnStatus, output: string, error: string | null } | null, turns: Array<{ id: string, prompt: string, source: MessageSource, status: TurnStatus, output: string, error: string | null }>, task: { id: string, title: string, workflowStep: string } } };

export type TurnOutputSubscriptionVariables = Exact<{
  sessionId: string;
}>;


export type TurnOutputSubscription = { turnOutput: { sessionId: string, turnId: string, offset: number, text: string, done: boolean, status: TurnStatus } };

export type CreateTaskMutationVariables = Exact<{
  input: CreateTaskInput;
}>;


export type CreateTaskMutation = { createTask: { task: { id: string } | null, session: { id: string } | null, userErrors: Array<{ code: ErrorCode, message: string }> } };

export type SendMessageMutationVariables = Exact<{
  input: SendMessageInput;
}>;


export type SendMessageMutation = { sendMessage: { queue: { id: string, sessionId: string, autoRun: boolean, pauseReason: PauseReason | null, heldBy: Array<HoldReason>, count: number, max: number | null, revision: number, entries: Array<{ id: string, position: number, content: string, source: MessageSource }> } | null, userErrors: Array<{ code: ErrorCode, message: string }> } };

export type EnqueueMessageMutationVariables = Exact<{
  input: EnqueueMessageInput;
}>;


export type EnqueueMessageMutation = { enqueueMessage: { queue: { id: string, sessionId: string, autoRun: boolean, pauseReason: PauseReason | null, heldBy: Array<HoldReason>, count: number, max: number | null, revision: number, entries: Array<{ id: string, position: number, content: string, source: MessageSource }> } | null, userErrors: Array<{ code: ErrorCode, message: string }> } };

export type UpdateQueueEntryMutationVariables = Exact<{
  input: UpdateQueueEntryInput;
}>;


export type UpdateQueueEntryMutation = { updateQueueEntry: { queue: { id: string, sessionId: string, autoRun: boolean, pauseReason: PauseReason | null, heldBy: Array<HoldReason>, count: number, max: number | null, revision: number, entries: Array<{ id: string, position: number, content: string, source: MessageSource }> } | null, userErrors: Array<{ code: ErrorCode, message: string }> } };

export type RemoveQueueEntryMutationVariables = Exact<{
  input: RemoveQueueEntryInput;
}>;


export type RemoveQueueEntryMutation = { removeQueueEntry: { queue: { id: string, sessionId: string, autoRun: boolean, pauseReason: PauseReason | null, heldBy: Array<HoldReason>, count: number, max: number | null, revision: number, entries: Array<{ id: string, position: number, content: string, source: MessageSource }> } | null, userErrors: Array<{ code: ErrorCode, message: string }> } };

export type ReorderQueueMutationVariables = Exact<{
  input: ReorderQueueInput;
}>;


export type ReorderQueueMutation = { reorderQueue: { queue: { id: string, sessionId: string, autoRun: boolean, pauseReason: PauseReason | null, heldBy: Array<HoldReason>, count: number, max: number | null, revision: number, entries: Array<{ id: string, position: number, content: string, source: MessageSource }> } | null, userErrors: Array<{ code: ErrorCode, message: string }> } };

export type SetAutoRunMutationVariables = Exact<{
  input: SetAutoRunInput;
}>;


export type SetAutoRunMutation = { setAutoRun: { dispatched: boolean, queue: { id: string, sessionId: string, autoRun: boolean, pauseReason: PauseReason | null, heldBy: Array<HoldReason>, count: number, max: number | null, revision: number, entries: Array<{ id: string, position: number, content: string, source: MessageSource }> } | null, userErrors: Array<{ code: ErrorCode, message: string }> } };

export type SendNowMutationVariables = Exact<{
  input: SendNowInput;
}>;


export type SendNowMutation = { sendNow: { sentCount: number, queue: { id: string, sessionId: string, autoRun: boolean, pauseReason: PauseReason | null, heldBy: Array<HoldReason>, count: number, max: number | null, revision: number, entries: Array<{ id: string, position: number, content: string, source: MessageSource }> } | null, userErrors: Array<{ code: ErrorCode, message: string }> } };

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
export const TurnFieldsFragmentDoc = new TypedDocumentString(`
    fragment TurnFields on Turn {
  id
  prompt
  source
  status
  output
  error
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
  clarification {
    id
    question
  }
  currentTurn {
    ...TurnFields
  }
  turns(last: 10) {
    ...TurnFields
  }
  task {
    id
    title
    workflowStep
  }
}
    fragment TurnFields on Turn {
  id
  prompt
  source
  status
  output
  error
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
}
fragment SessionCore on Session {
  id
  taskId
  agent
  state
  revision
  promptable
  clarification {
    id
    question
  }
  currentTurn {
    ...TurnFields
  }
  turns(last: 10) {
    ...TurnFields
  }
  task {
    id
    title
    workflowStep
  }
}`) as unknown as TypedDocumentString<SessionSnapshotQuery, SessionSnapshotQueryVariables>;
export const TasksDocument = new TypedDocumentString(`
    query Tasks {
  tasks(first: 50) {
    id
    title
    workflowStep
    currentSession {
      id
      state
    }
  }
}
    `) as unknown as TypedDocumentString<TasksQuery, TasksQueryVariables>;
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
}
fragment SessionCore on Session {
  id
  taskId
  agent
  state
  revision
  promptable
  clarification {
    id
    question
  }
  currentTurn {
    ...TurnFields
  }
  turns(last: 10) {
    ...TurnFields
  }
  task {
    id
    title
    workflowStep
  }
}`) as unknown as TypedDocumentString<SessionChangedSubscription, SessionChangedSubscriptionVariables>;
export const TurnOutputDocument = new TypedDocumentString(`
    subscription TurnOutput($sessionId: ID!) {
  turnOutput(sessionId: $sessionId) {
    sessionId
    turnId
    offset
    text
    done
    status
  }
}
    `) as unknown as TypedDocumentString<TurnOutputSubscription, TurnOutputSubscriptionVariables>;
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
  }
}`) as unknown as TypedDocumentString<SendMessageMutation, SendMessageMutationVariables>;
export const EnqueueMessageDocument = new TypedDocumentString(`
    mutation EnqueueMessage($input: EnqueueMessageInput!) {
  enqueueMessage(input: $input) {
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
  }
}`) as unknown as TypedDocumentString<SendNowMutation, SendNowMutationVariables>;
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