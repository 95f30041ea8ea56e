"""GraphQL types of agent profiles (A1) and of a turn's structured output (A3).

``Turn.items`` answers a list of the ``TurnItem`` interface; each kind is its own type, so a
client selects what it shows with inline fragments (``... on ToolCallItem { title status }``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any

import strawberry

from turnqueue import domain
from turnqueue.domain import AgentType, ApprovalOutcome, AuthState, ConversationStart, ItemKind
from turnqueue.schema.fields import Copied, copied, plain


@strawberry.type(description="An authentication method an agent offers (ACP `authMethods`).")
class AuthMethod:
    id: str = plain("The method's id (a profile's `auth_method`).")
    name: str = plain("Its name, as the agent gives it.")
    description: str | None = plain("The agent's own description.")
    env_vars: list[str] = plain(
        "The environment variables it needs (set them in the profile's `env` and turnqueue "
        "authenticates with it); empty for other kinds of method."
    )


@strawberry.type(description="What an `acp` profile's agent last said about authentication (A11).")
class AgentAuth:
    state: AuthState = plain("Where authentication stands.")
    method: str | None = plain("The method `authenticate` succeeded with; null otherwise.")
    methods: list[AuthMethod] = plain(
        "The methods the agent lists in `initialize` (empty until it started)."
    )
    message: str | None = plain("The agent's own refusal when `state` is REFUSED; null otherwise.")


@strawberry.type(
    description="The agent's own session behind a session (A8): kept in the session's records "
    "from the moment the agent answered `session/new`, and continued whenever its agent starts "
    "again (after an idle stop, a crash, a restart, or on another instance)."
)
class AgentConversation(Copied[domain.AgentConversation]):
    agent_session_id: str = plain("The agent's own session id.")
    resumed: ConversationStart = plain(
        "How the conversation was opened the last time its agent started."
    )
    resume_error: str | None = plain(
        "Why continuing it failed the last time (`resumed` is then NEW), in the agent's own words "
        "where it gave any; null otherwise."
    )
    can_resume: bool = plain("The agent advertises `session/resume`.")
    can_load: bool = plain("The agent advertises `session/load`.")
    can_close: bool = plain("The agent advertises `session/close`.")
    updated_at: datetime = plain("When its agent last opened it.")


@strawberry.type(description="An agent profile a task can run with (A1): never its command or env.")
class AgentProfile:
    name: str = plain("The name `createTask(input: {agent})` takes.")
    type: AgentType = plain("What runs the profile's turns.")
    auth: AgentAuth | None = plain(
        "A11: what the profile's agent last said about authentication, as this instance saw it "
        "(UNKNOWN until its first start); null for profiles that are not `acp`."
    )
    steering: bool = plain(
        "Q16: whether a `delivery: STEER` send may be taken by the running turn of a session with "
        "this profile: true for the scripted agent, false for `command` (its STEER sends are "
        "queued, as AUTO would). For `acp` profiles: true until the agent answered a steering "
        "offer that it has no `_session/steering` method (as this instance saw it: ACP's "
        "`initialize` does not say), then false; an agent that has it may still decline one offer "
        "(outcome QUEUED)."
    )

    @classmethod
    def from_domain(cls, profile: domain.AgentProfile) -> AgentProfile:
        auth = None
        if profile.auth is not None:
            methods = [
                copied(AuthMethod, m, env_vars=list(m.env_vars)) for m in profile.auth.methods
            ]
            auth = copied(AgentAuth, profile.auth, methods=methods)
        return copied(cls, profile, auth=auth)


@strawberry.interface(
    description=(
        "One structured piece of a turn's output (A3), in the order the agent produced it. "
        "Consecutive message (or thought) chunks are joined into one item; a tool call is one "
        "item that its later updates change in place."
    )
)
class TurnItem:
    index: int = plain("The item's position in the turn, from 0.")
    kind: ItemKind = plain("Which kind of item this is.")


@strawberry.type(description="Text the agent wrote to the user (also part of `Turn.output`).")
class MessageItem(TurnItem):
    text: str = plain("The message text.")


@strawberry.type(description="The agent's reasoning, shown apart from its answer.")
class ThoughtItem(TurnItem):
    text: str = plain("The thought text.")


@strawberry.type(description="A file location a tool call reads or changes.")
class ToolCallLocation:
    path: str = plain("The absolute path.")
    line: int | None = plain("The line, when the agent gave one.")


@strawberry.type(description="A tool the agent runs (read, edit, execute, …) and its progress.")
class ToolCallItem(TurnItem):
    tool_call_id: str = plain("The agent's id of the tool call.")
    title: str = plain("What the tool call does, for people.")
    tool_kind: str = plain(
        "ACP tool kind: read, edit, delete, move, search, execute, think, fetch, other."
    )
    status: str = plain("pending, in_progress, completed or failed.")
    text: str = plain("The text of its content blocks, joined.")
    content_json: str = plain("Its content blocks (text, diffs, terminals) as ACP JSON.")
    locations: list[ToolCallLocation] = plain("Files it touches.")


@strawberry.type(description="One step of the agent's plan.")
class PlanEntry:
    content: str = plain("What the step is.")
    priority: str = plain("high, medium or low.")
    status: str = plain("pending, in_progress or completed.")


@strawberry.type(description="The agent's plan; a new plan from the agent replaces it.")
class PlanItem(TurnItem):
    entries: list[PlanEntry] = plain("The plan's steps, in order.")


@strawberry.type(description="A message the user steered into the running turn (Q16).")
class SteerItem(TurnItem):
    text: str = plain("The message, as the agent took it.")
    entry_id: strawberry.ID = plain(
        "The queue entry it was sent as (`SendMessagePayload.queuedEntry` is null then; the entry "
        "is gone from the queue)."
    )


@strawberry.type(description="An agent update turnqueue does not interpret, kept whole.")
class RawItem(TurnItem):
    json: str = plain("The ACP `session/update` object as JSON.")


def _text(content: Any) -> str:
    parts: list[str] = []
    for block in content if isinstance(content, list) else []:
        inner = block.get("content") if isinstance(block, Mapping) else None
        if isinstance(inner, Mapping) and isinstance(inner.get("text"), str):
            parts.append(inner["text"])
    return "".join(parts)


def item_from_domain(index: int, item: domain.TurnItem) -> TurnItem:
    data = item.data
    kind = item.kind
    if kind is ItemKind.MESSAGE:
        return MessageItem(index=index, kind=kind, text=str(data.get("text", "")))
    if kind is ItemKind.THOUGHT:
        return ThoughtItem(index=index, kind=kind, text=str(data.get("text", "")))
    if kind is ItemKind.TOOL_CALL:
        locations = [
            ToolCallLocation(path=str(loc.get("path", "")), line=loc.get("line"))
            for loc in data.get("locations") or []
            if isinstance(loc, Mapping)
        ]
        return ToolCallItem(
            index=index,
            kind=kind,
            tool_call_id=str(data.get("toolCallId", item.key or "")),
            title=str(data.get("title", "")),
            tool_kind=str(data.get("kind", "other")),
            status=str(data.get("status", "pending")),
            text=_text(data.get("content")),
            content_json=json.dumps(data.get("content") or []),
            locations=locations,
        )
    if kind is ItemKind.PLAN:
        entries = [
            PlanEntry(
                content=str(e.get("content", "")),
                priority=str(e.get("priority", "medium")),
                status=str(e.get("status", "pending")),
            )
            for e in data.get("entries") or []
            if isinstance(e, Mapping)
        ]
        return PlanItem(index=index, kind=kind, entries=entries)
    if kind is ItemKind.STEER:
        text, entry = str(data.get("text", "")), str(data.get("entryId", ""))
        return SteerItem(index=index, kind=kind, text=text, entry_id=strawberry.ID(entry))
    return RawItem(index=index, kind=kind, json=json.dumps(dict(data), default=str))


#: The concrete types, for ``Schema(types=…)`` (an interface's implementations must be listed).
ITEM_TYPES = (MessageItem, ThoughtItem, ToolCallItem, PlanItem, SteerItem, RawItem)


@strawberry.type(description="One answer an approval offers (A6).")
class ApprovalOption:
    id: strawberry.ID = plain("Pass it as `optionId` to answerApproval.")
    name: str = plain("The option's label, for people.")
    kind: str = plain("ACP option kind: allow_once, allow_always, reject_once or reject_always.")


@strawberry.type(
    description=(
        "An agent's request for permission during a turn (A6): pending until answered with "
        "answerApproval, or cancelled when the turn is cancelled or ends. Every approval and "
        "its answer stays with its turn (`Turn.approvals`)."
    )
)
class Approval:
    id: strawberry.ID = plain("Pass it as `approvalId` to answer it.")
    turn_id: strawberry.ID = plain("The turn that asked.")
    title: str = plain("What the agent wants to do, for people.")
    tool_call_id: str | None = plain(
        "The tool call it is about (a ToolCallItem's `toolCallId`), when given."
    )
    options: list[ApprovalOption] = plain("The answers it offers.")
    requested_at: datetime = plain("When the agent asked.")
    outcome: ApprovalOutcome = plain("Whether and how it was answered.")
    option_id: strawberry.ID | None = plain(
        "The option chosen; null while pending or when cancelled."
    )
    answered_by: str | None = plain(
        "Who answered: a principal, or `policy:allow` / `policy:reject` for a profile's policy; "
        "null while pending or when cancelled."
    )
    answered_at: datetime | None = plain("When it was answered or cancelled; null while pending.")

    @classmethod
    def from_domain(cls, approval: domain.Approval) -> Approval:
        return copied(
            cls,
            approval,
            options=[copied(ApprovalOption, o) for o in approval.options],
            option_id=strawberry.ID(approval.option_id) if approval.option_id else None,
        )
