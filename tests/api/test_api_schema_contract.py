"""U1: the committed ``schema.graphql`` is the code's schema, and the code breaks nothing in it.

Also checks the §7 contract names that clients rely on are all present.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from graphql import (
    REMOVE,
    FieldDefinitionNode,
    Visitor,
    build_ast_schema,
    build_schema,
    find_breaking_changes,
    find_dangerous_changes,
    parse,
    visit,
)

from turnqueue.api import build_schema as build_api_schema
from turnqueue.api import print_schema_sdl
from turnqueue.cli import main
from turnqueue.settings import Settings

COMMITTED = Path(__file__).resolve().parents[2] / "schema.graphql"


def test_u1_schema_file_matches_code() -> None:
    assert COMMITTED.read_text(encoding="utf-8") == print_schema_sdl(), (
        "schema.graphql is stale: run `turnqueue export-schema`"
    )


def test_u1_no_breaking_changes_against_committed_schema() -> None:
    committed = build_schema(COMMITTED.read_text(encoding="utf-8"))
    current = build_api_schema(Settings())._schema
    assert find_breaking_changes(committed, current) == []
    assert find_dangerous_changes(committed, current) == []


def test_u1_the_check_can_fail() -> None:
    """A removed field is reported (guards the guard)."""
    document = parse(COMMITTED.read_text(encoding="utf-8"))
    committed = build_ast_schema(document)

    class DropField(Visitor):  # the field with its description (a text edit would orphan it)
        def enter_field_definition(self, node: FieldDefinitionNode, *_: Any) -> Any:
            return REMOVE if node.name.value == "cancellationPending" else None

    shrunk = build_ast_schema(visit(document, DropField()))
    assert [c.description for c in find_breaking_changes(committed, shrunk)] == [
        "Field Session.cancellationPending was removed."
    ]


def test_u1_contract_names_of_section_7() -> None:
    schema = build_schema(COMMITTED.read_text(encoding="utf-8"))
    expected_fields = {
        "Query": {"session", "task", "tasks", "agents"},
        "Mutation": {
            "createTask",
            "sendMessage",
            "enqueueMessage",
            "updateQueueEntry",
            "removeQueueEntry",
            "clearQueue",
            "reorderQueue",
            "cancel",
            "setAutoRun",
            "sendNow",
            "drain",
            "answerClarification",
            "moveTask",
            "answerApproval",
        },
        "Subscription": {
            "cancellationChanged",
            "queueStatusChanged",
            "sessionChanged",
            "turnOutput",
        },
        "Session": {
            "id",
            "task",
            "agent",
            "state",
            "revision",
            "promptable",
            "cancellationPending",
            "cancellationRevision",
            "cancellation",
            "autoRun",
            "queue",
            "clarification",
            "pendingApproval",
            "currentTurn",
            "turns",
            "updatedAt",
        },
        "QueueStatus": {
            "id",
            "sessionId",
            "autoRun",
            "pauseReason",
            "heldBy",
            "entries",
            "count",
            "max",
            "revision",
        },
        "CancellationStatus": {"id", "sessionId", "pending", "revision"},
        "TurnOutputChunk": {"sessionId", "turnId", "offset", "text", "done", "status"},
        "UserError": {"code", "message", "field"},
        "Approval": {"id", "title", "toolCallId", "options", "requestedAt"},
        "ApprovalOption": {"id", "name", "kind"},
        "AgentProfile": {"name", "type"},
        "AnswerApprovalPayload": {"approval", "session", "userErrors"},
    }
    for type_name, fields in expected_fields.items():
        assert fields <= set(schema.type_map[type_name].fields), type_name  # type: ignore[attr-defined]
    codes = set(schema.type_map["ErrorCode"].values)  # type: ignore[attr-defined]
    assert codes == {
        "NOT_FOUND",
        "INVALID_INPUT",
        "SESSION_BUSY",
        "SESSION_NOT_PROMPTABLE",
        "CLARIFICATION_PENDING",
        "NO_CLARIFICATION",
        "QUEUE_FULL",
        "QUEUE_EMPTY",
        "QUEUE_CHANGED",
        "ENTRY_NOT_FOUND",
        "NOT_EDITABLE",
        "SEND_NOW_CONFLICT",
        "TURN_CHANGED",
        "APPROVAL_RESOLVED",
        "IDEMPOTENCY_CONFLICT",  # Q15
    }
    assert set(schema.type_map["AgentType"].values) == {"ACP", "COMMAND", "SCRIPTED"}  # type: ignore[attr-defined]
    assert "APPROVAL" in schema.type_map["HoldReason"].values  # type: ignore[attr-defined]
    assert {"DateTime", "Revision"} <= set(schema.type_map)


def test_u1_export_schema_command_writes_the_sdl(tmp_path: Path) -> None:
    target = tmp_path / "out.graphql"
    assert main(["export-schema", str(target)]) == 0
    assert target.read_text(encoding="utf-8") == print_schema_sdl()
