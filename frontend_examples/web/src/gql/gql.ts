/* eslint-disable */
import * as types from './graphql';



/**
 * Map of all GraphQL operations in the project.
 *
 * This map has several performance disadvantages:
 * 1. It is not tree-shakeable, so it will include all operations in the project.
 * 2. It is not minifiable, so the string of a GraphQL query will be multiple times inside the bundle.
 * 3. It does not support dead code elimination, so it will add unused operations.
 *
 * Therefore it is highly recommended to use the babel or swc plugin for production.
 * Learn more about it here: https://the-guild.dev/graphql/codegen/plugins/presets/preset-client#reducing-bundle-size
 */
type Documents = {
    "\n  fragment Queue on QueueStatus {\n    id sessionId autoRun pauseReason heldBy count max revision\n    entries { id position content source clientMessageId }\n  }\n": typeof types.QueueFragmentDoc,
    "\n  fragment Cancellation on CancellationStatus {\n    id sessionId pending revision\n  }\n": typeof types.CancellationFragmentDoc,
    "\n  fragment TurnFields on Turn {\n    id prompt source status output error startedAt endedAt clientMessageId\n  }\n": typeof types.TurnFieldsFragmentDoc,
    "\n  fragment ItemFields on TurnItem {\n    __typename index\n    ... on MessageItem { text }\n    ... on ThoughtItem { text }\n    ... on ToolCallItem { toolCallId title toolKind status text locations { path line } }\n    ... on PlanItem { entries { content priority status } }\n    ... on RawItem { json }\n    ... on SteerItem { text entryId }\n  }\n": typeof types.ItemFieldsFragmentDoc,
    "\n  fragment SessionCore on Session {\n    id taskId agent state revision promptable agentError\n    agentConversation { resumed resumeError }\n    clarification { id question }\n    pendingApproval { id title toolCallId options { id name kind } }\n    currentTurn { ...TurnFields }\n    turnsConnection(last: 20) { edges { node { ...TurnFields } } }\n    task { id title workflowStep currentSession { id } }\n  }\n": typeof types.SessionCoreFragmentDoc,
    "\n  query SessionSnapshot($id: ID!) {\n    session(id: $id) { ...SessionCore queue { ...Queue } cancellation { ...Cancellation } }\n  }\n": typeof types.SessionSnapshotDocument,
    "\n  query Tasks($after: String) {\n    tasksConnection(first: 30, after: $after) {\n      edges { node { id title workflowStep createdAt currentSession { id state agent } } }\n      pageInfo { hasNextPage endCursor }\n    }\n  }\n": typeof types.TasksDocument,
    "\n  query Agents { agents { name type steering } }\n": typeof types.AgentsDocument,
    "\n    subscription QueueStatusChanged($sessionId: ID!) {\n      queueStatusChanged(sessionId: $sessionId) { ...Queue }\n    }\n  ": typeof types.QueueStatusChangedDocument,
    "\n    subscription CancellationChanged($sessionId: ID!) {\n      cancellationChanged(sessionId: $sessionId) { ...Cancellation }\n    }\n  ": typeof types.CancellationChangedDocument,
    "\n    subscription SessionChanged($sessionId: ID!) {\n      sessionChanged(sessionId: $sessionId) { ...SessionCore cancellation { ...Cancellation } }\n    }\n  ": typeof types.SessionChangedDocument,
    "\n    subscription TurnOutput($sessionId: ID!, $turnId: ID, $afterOffset: Int) {\n      turnOutput(sessionId: $sessionId, turnId: $turnId, afterOffset: $afterOffset) {\n        sessionId turnId offset text done status\n      }\n    }\n  ": typeof types.TurnOutputDocument,
    "\n    subscription TurnItems($sessionId: ID!, $turnId: ID, $afterOffset: Int) {\n      turnItems(sessionId: $sessionId, turnId: $turnId, afterOffset: $afterOffset) {\n        sessionId turnId offset nextOffset done status items { ...ItemFields }\n      }\n    }\n  ": typeof types.TurnItemsDocument,
    "\n    mutation CreateTask($input: CreateTaskInput!) {\n      createTask(input: $input) { task { id } session { id } userErrors { code message } }\n    }\n  ": typeof types.CreateTaskDocument,
    "\n    mutation SendMessage($input: SendMessageInput!) {\n      sendMessage(input: $input) {\n        queue { ...Queue }\n        turn { id clientMessageId }\n        queuedEntry { id clientMessageId }\n        outcome\n        userErrors { code message }\n      }\n    }\n  ": typeof types.SendMessageDocument,
    "\n    mutation EnqueueMessage($input: EnqueueMessageInput!) {\n      enqueueMessage(input: $input) {\n        queue { ...Queue }\n        entry { id clientMessageId }\n        dispatched\n        userErrors { code message }\n      }\n    }\n  ": typeof types.EnqueueMessageDocument,
    "\n    mutation UpdateQueueEntry($input: UpdateQueueEntryInput!) {\n      updateQueueEntry(input: $input) { queue { ...Queue } userErrors { code message } }\n    }\n  ": typeof types.UpdateQueueEntryDocument,
    "\n    mutation RemoveQueueEntry($input: RemoveQueueEntryInput!) {\n      removeQueueEntry(input: $input) { queue { ...Queue } userErrors { code message } }\n    }\n  ": typeof types.RemoveQueueEntryDocument,
    "\n    mutation ReorderQueue($input: ReorderQueueInput!) {\n      reorderQueue(input: $input) { queue { ...Queue } userErrors { code message } }\n    }\n  ": typeof types.ReorderQueueDocument,
    "\n    mutation SetAutoRun($input: SetAutoRunInput!) {\n      setAutoRun(input: $input) { queue { ...Queue } dispatched userErrors { code message } }\n    }\n  ": typeof types.SetAutoRunDocument,
    "\n    mutation SendNow($input: SendNowInput!) {\n      sendNow(input: $input) { queue { ...Queue } sentCount userErrors { code message } }\n    }\n  ": typeof types.SendNowDocument,
    "\n    mutation AnswerClarification($input: AnswerClarificationInput!) {\n      answerClarification(input: $input) { session { id } userErrors { code message } }\n    }\n  ": typeof types.AnswerClarificationDocument,
    "\n    mutation AnswerApproval($input: AnswerApprovalInput!) {\n      answerApproval(input: $input) { approval { id } session { id } userErrors { code message } }\n    }\n  ": typeof types.AnswerApprovalDocument,
    "\n    mutation Cancel($input: CancelInput!) {\n      cancel(input: $input) { cancellation { ...Cancellation } outcome userErrors { code message } }\n    }\n  ": typeof types.CancelDocument,
};
const documents: Documents = {
    "\n  fragment Queue on QueueStatus {\n    id sessionId autoRun pauseReason heldBy count max revision\n    entries { id position content source clientMessageId }\n  }\n": types.QueueFragmentDoc,
    "\n  fragment Cancellation on CancellationStatus {\n    id sessionId pending revision\n  }\n": types.CancellationFragmentDoc,
    "\n  fragment TurnFields on Turn {\n    id prompt source status output error startedAt endedAt clientMessageId\n  }\n": types.TurnFieldsFragmentDoc,
    "\n  fragment ItemFields on TurnItem {\n    __typename index\n    ... on MessageItem { text }\n    ... on ThoughtItem { text }\n    ... on ToolCallItem { toolCallId title toolKind status text locations { path line } }\n    ... on PlanItem { entries { content priority status } }\n    ... on RawItem { json }\n    ... on SteerItem { text entryId }\n  }\n": types.ItemFieldsFragmentDoc,
    "\n  fragment SessionCore on Session {\n    id taskId agent state revision promptable agentError\n    agentConversation { resumed resumeError }\n    clarification { id question }\n    pendingApproval { id title toolCallId options { id name kind } }\n    currentTurn { ...TurnFields }\n    turnsConnection(last: 20) { edges { node { ...TurnFields } } }\n    task { id title workflowStep currentSession { id } }\n  }\n": types.SessionCoreFragmentDoc,
    "\n  query SessionSnapshot($id: ID!) {\n    session(id: $id) { ...SessionCore queue { ...Queue } cancellation { ...Cancellation } }\n  }\n": types.SessionSnapshotDocument,
    "\n  query Tasks($after: String) {\n    tasksConnection(first: 30, after: $after) {\n      edges { node { id title workflowStep createdAt currentSession { id state agent } } }\n      pageInfo { hasNextPage endCursor }\n    }\n  }\n": types.TasksDocument,
    "\n  query Agents { agents { name type steering } }\n": types.AgentsDocument,
    "\n    subscription QueueStatusChanged($sessionId: ID!) {\n      queueStatusChanged(sessionId: $sessionId) { ...Queue }\n    }\n  ": types.QueueStatusChangedDocument,
    "\n    subscription CancellationChanged($sessionId: ID!) {\n      cancellationChanged(sessionId: $sessionId) { ...Cancellation }\n    }\n  ": types.CancellationChangedDocument,
    "\n    subscription SessionChanged($sessionId: ID!) {\n      sessionChanged(sessionId: $sessionId) { ...SessionCore cancellation { ...Cancellation } }\n    }\n  ": types.SessionChangedDocument,
    "\n    subscription TurnOutput($sessionId: ID!, $turnId: ID, $afterOffset: Int) {\n      turnOutput(sessionId: $sessionId, turnId: $turnId, afterOffset: $afterOffset) {\n        sessionId turnId offset text done status\n      }\n    }\n  ": types.TurnOutputDocument,
    "\n    subscription TurnItems($sessionId: ID!, $turnId: ID, $afterOffset: Int) {\n      turnItems(sessionId: $sessionId, turnId: $turnId, afterOffset: $afterOffset) {\n        sessionId turnId offset nextOffset done status items { ...ItemFields }\n      }\n    }\n  ": types.TurnItemsDocument,
    "\n    mutation CreateTask($input: CreateTaskInput!) {\n      createTask(input: $input) { task { id } session { id } userErrors { code message } }\n    }\n  ": types.CreateTaskDocument,
    "\n    mutation SendMessage($input: SendMessageInput!) {\n      sendMessage(input: $input) {\n        queue { ...Queue }\n        turn { id clientMessageId }\n        queuedEntry { id clientMessageId }\n        outcome\n        userErrors { code message }\n      }\n    }\n  ": types.SendMessageDocument,
    "\n    mutation EnqueueMessage($input: EnqueueMessageInput!) {\n      enqueueMessage(input: $input) {\n        queue { ...Queue }\n        entry { id clientMessageId }\n        dispatched\n        userErrors { code message }\n      }\n    }\n  ": types.EnqueueMessageDocument,
    "\n    mutation UpdateQueueEntry($input: UpdateQueueEntryInput!) {\n      updateQueueEntry(input: $input) { queue { ...Queue } userErrors { code message } }\n    }\n  ": types.UpdateQueueEntryDocument,
    "\n    mutation RemoveQueueEntry($input: RemoveQueueEntryInput!) {\n      removeQueueEntry(input: $input) { queue { ...Queue } userErrors { code message } }\n    }\n  ": types.RemoveQueueEntryDocument,
    "\n    mutation ReorderQueue($input: ReorderQueueInput!) {\n      reorderQueue(input: $input) { queue { ...Queue } userErrors { code message } }\n    }\n  ": types.ReorderQueueDocument,
    "\n    mutation SetAutoRun($input: SetAutoRunInput!) {\n      setAutoRun(input: $input) { queue { ...Queue } dispatched userErrors { code message } }\n    }\n  ": types.SetAutoRunDocument,
    "\n    mutation SendNow($input: SendNowInput!) {\n      sendNow(input: $input) { queue { ...Queue } sentCount userErrors { code message } }\n    }\n  ": types.SendNowDocument,
    "\n    mutation AnswerClarification($input: AnswerClarificationInput!) {\n      answerClarification(input: $input) { session { id } userErrors { code message } }\n    }\n  ": types.AnswerClarificationDocument,
    "\n    mutation AnswerApproval($input: AnswerApprovalInput!) {\n      answerApproval(input: $input) { approval { id } session { id } userErrors { code message } }\n    }\n  ": types.AnswerApprovalDocument,
    "\n    mutation Cancel($input: CancelInput!) {\n      cancel(input: $input) { cancellation { ...Cancellation } outcome userErrors { code message } }\n    }\n  ": types.CancelDocument,
};

/**
 * The graphql function is used to parse GraphQL queries into a document that can be used by GraphQL clients.
 */
export function graphql(source: "\n  fragment Queue on QueueStatus {\n    id sessionId autoRun pauseReason heldBy count max revision\n    entries { id position content source clientMessageId }\n  }\n"): typeof import('./graphql').QueueFragmentDoc;
/**
 * The graphql function is used to parse GraphQL queries into a document that can be used by GraphQL clients.
 */
export function graphql(source: "\n  fragment Cancellation on CancellationStatus {\n    id sessionId pending revision\n  }\n"): typeof import('./graphql').CancellationFragmentDoc;
/**
 * The graphql function is used to parse GraphQL queries into a document that can be used by GraphQL clients.
 */
export function graphql(source: "\n  fragment TurnFields on Turn {\n    id prompt source status output error startedAt endedAt clientMessageId\n  }\n"): typeof import('./graphql').TurnFieldsFragmentDoc;
/**
 * The graphql function is used to parse GraphQL queries into a document that can be used by GraphQL clients.
 */
export function graphql(source: "\n  fragment ItemFields on TurnItem {\n    __typename index\n    ... on MessageItem { text }\n    ... on ThoughtItem { text }\n    ... on ToolCallItem { toolCallId title toolKind status text locations { path line } }\n    ... on PlanItem { entries { content priority status } }\n    ... on RawItem { json }\n    ... on SteerItem { text entryId }\n  }\n"): typeof import('./graphql').ItemFieldsFragmentDoc;
/**
 * The graphql function is used to parse GraphQL queries into a document that can be used by GraphQL clients.
 */
export function graphql(source: "\n  fragment SessionCore on Session {\n    id taskId agent state revision promptable agentError\n    agentConversation { resumed resumeError }\n    clarification { id question }\n    pendingApproval { id title toolCallId options { id name kind } }\n    currentTurn { ...TurnFields }\n    turnsConnection(last: 20) { edges { node { ...TurnFields } } }\n    task { id title workflowStep currentSession { id } }\n  }\n"): typeof import('./graphql').SessionCoreFragmentDoc;
/**
 * The graphql function is used to parse GraphQL queries into a document that can be used by GraphQL clients.
 */
export function graphql(source: "\n  query SessionSnapshot($id: ID!) {\n    session(id: $id) { ...SessionCore queue { ...Queue } cancellation { ...Cancellation } }\n  }\n"): typeof import('./graphql').SessionSnapshotDocument;
/**
 * The graphql function is used to parse GraphQL queries into a document that can be used by GraphQL clients.
 */
export function graphql(source: "\n  query Tasks($after: String) {\n    tasksConnection(first: 30, after: $after) {\n      edges { node { id title workflowStep createdAt currentSession { id state agent } } }\n      pageInfo { hasNextPage endCursor }\n    }\n  }\n"): typeof import('./graphql').TasksDocument;
/**
 * The graphql function is used to parse GraphQL queries into a document that can be used by GraphQL clients.
 */
export function graphql(source: "\n  query Agents { agents { name type steering } }\n"): typeof import('./graphql').AgentsDocument;
/**
 * The graphql function is used to parse GraphQL queries into a document that can be used by GraphQL clients.
 */
export function graphql(source: "\n    subscription QueueStatusChanged($sessionId: ID!) {\n      queueStatusChanged(sessionId: $sessionId) { ...Queue }\n    }\n  "): typeof import('./graphql').QueueStatusChangedDocument;
/**
 * The graphql function is used to parse GraphQL queries into a document that can be used by GraphQL clients.
 */
export function graphql(source: "\n    subscription CancellationChanged($sessionId: ID!) {\n      cancellationChanged(sessionId: $sessionId) { ...Cancellation }\n    }\n  "): typeof import('./graphql').CancellationChangedDocument;
/**
 * The graphql function is used to parse GraphQL queries into a document that can be used by GraphQL clients.
 */
export function graphql(source: "\n    subscription SessionChanged($sessionId: ID!) {\n      sessionChanged(sessionId: $sessionId) { ...SessionCore cancellation { ...Cancellation } }\n    }\n  "): typeof import('./graphql').SessionChangedDocument;
/**
 * The graphql function is used to parse GraphQL queries into a document that can be used by GraphQL clients.
 */
export function graphql(source: "\n    subscription TurnOutput($sessionId: ID!, $turnId: ID, $afterOffset: Int) {\n      turnOutput(sessionId: $sessionId, turnId: $turnId, afterOffset: $afterOffset) {\n        sessionId turnId offset text done status\n      }\n    }\n  "): typeof import('./graphql').TurnOutputDocument;
/**
 * The graphql function is used to parse GraphQL queries into a document that can be used by GraphQL clients.
 */
export function graphql(source: "\n    subscription TurnItems($sessionId: ID!, $turnId: ID, $afterOffset: Int) {\n      turnItems(sessionId: $sessionId, turnId: $turnId, afterOffset: $afterOffset) {\n        sessionId turnId offset nextOffset done status items { ...ItemFields }\n      }\n    }\n  "): typeof import('./graphql').TurnItemsDocument;
/**
 * The graphql function is used to parse GraphQL queries into a document that can be used by GraphQL clients.
 */
export function graphql(source: "\n    mutation CreateTask($input: CreateTaskInput!) {\n      createTask(input: $input) { task { id } session { id } userErrors { code message } }\n    }\n  "): typeof import('./graphql').CreateTaskDocument;
/**
 * The graphql function is used to parse GraphQL queries into a document that can be used by GraphQL clients.
 */
export function graphql(source: "\n    mutation SendMessage($input: SendMessageInput!) {\n      sendMessage(input: $input) {\n        queue { ...Queue }\n        turn { id clientMessageId }\n        queuedEntry { id clientMessageId }\n        outcome\n        userErrors { code message }\n      }\n    }\n  "): typeof import('./graphql').SendMessageDocument;
/**
 * The graphql function is used to parse GraphQL queries into a document that can be used by GraphQL clients.
 */
export function graphql(source: "\n    mutation EnqueueMessage($input: EnqueueMessageInput!) {\n      enqueueMessage(input: $input) {\n        queue { ...Queue }\n        entry { id clientMessageId }\n        dispatched\n        userErrors { code message }\n      }\n    }\n  "): typeof import('./graphql').EnqueueMessageDocument;
/**
 * The graphql function is used to parse GraphQL queries into a document that can be used by GraphQL clients.
 */
export function graphql(source: "\n    mutation UpdateQueueEntry($input: UpdateQueueEntryInput!) {\n      updateQueueEntry(input: $input) { queue { ...Queue } userErrors { code message } }\n    }\n  "): typeof import('./graphql').UpdateQueueEntryDocument;
/**
 * The graphql function is used to parse GraphQL queries into a document that can be used by GraphQL clients.
 */
export function graphql(source: "\n    mutation RemoveQueueEntry($input: RemoveQueueEntryInput!) {\n      removeQueueEntry(input: $input) { queue { ...Queue } userErrors { code message } }\n    }\n  "): typeof import('./graphql').RemoveQueueEntryDocument;
/**
 * The graphql function is used to parse GraphQL queries into a document that can be used by GraphQL clients.
 */
export function graphql(source: "\n    mutation ReorderQueue($input: ReorderQueueInput!) {\n      reorderQueue(input: $input) { queue { ...Queue } userErrors { code message } }\n    }\n  "): typeof import('./graphql').ReorderQueueDocument;
/**
 * The graphql function is used to parse GraphQL queries into a document that can be used by GraphQL clients.
 */
export function graphql(source: "\n    mutation SetAutoRun($input: SetAutoRunInput!) {\n      setAutoRun(input: $input) { queue { ...Queue } dispatched userErrors { code message } }\n    }\n  "): typeof import('./graphql').SetAutoRunDocument;
/**
 * The graphql function is used to parse GraphQL queries into a document that can be used by GraphQL clients.
 */
export function graphql(source: "\n    mutation SendNow($input: SendNowInput!) {\n      sendNow(input: $input) { queue { ...Queue } sentCount userErrors { code message } }\n    }\n  "): typeof import('./graphql').SendNowDocument;
/**
 * The graphql function is used to parse GraphQL queries into a document that can be used by GraphQL clients.
 */
export function graphql(source: "\n    mutation AnswerClarification($input: AnswerClarificationInput!) {\n      answerClarification(input: $input) { session { id } userErrors { code message } }\n    }\n  "): typeof import('./graphql').AnswerClarificationDocument;
/**
 * The graphql function is used to parse GraphQL queries into a document that can be used by GraphQL clients.
 */
export function graphql(source: "\n    mutation AnswerApproval($input: AnswerApprovalInput!) {\n      answerApproval(input: $input) { approval { id } session { id } userErrors { code message } }\n    }\n  "): typeof import('./graphql').AnswerApprovalDocument;
/**
 * The graphql function is used to parse GraphQL queries into a document that can be used by GraphQL clients.
 */
export function graphql(source: "\n    mutation Cancel($input: CancelInput!) {\n      cancel(input: $input) { cancellation { ...Cancellation } outcome userErrors { code message } }\n    }\n  "): typeof import('./graphql').CancelDocument;


export function graphql(source: string) {
  return (documents as any)[source] ?? {};
}
