"""The error hierarchy. A :class:`UserFacingError` never changes stored state (the engine raises
it before committing, or inside the transaction so that it rolls back). Anything else raised in a
request, :class:`StoreError` included, is a fault: masked to clients and logged with detail."""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum


class ErrorCode(StrEnum):
    NOT_FOUND = "NOT_FOUND"
    INVALID_INPUT = "INVALID_INPUT"
    SESSION_BUSY = "SESSION_BUSY"
    SESSION_NOT_PROMPTABLE = "SESSION_NOT_PROMPTABLE"
    CLARIFICATION_PENDING = "CLARIFICATION_PENDING"
    NO_CLARIFICATION = "NO_CLARIFICATION"
    QUEUE_FULL = "QUEUE_FULL"
    QUEUE_EMPTY = "QUEUE_EMPTY"
    QUEUE_CHANGED = "QUEUE_CHANGED"
    ENTRY_NOT_FOUND = "ENTRY_NOT_FOUND"
    NOT_EDITABLE = "NOT_EDITABLE"
    SEND_NOW_CONFLICT = "SEND_NOW_CONFLICT"
    TURN_CHANGED = "TURN_CHANGED"
    APPROVAL_RESOLVED = "APPROVAL_RESOLVED"
    IDEMPOTENCY_CONFLICT = "IDEMPOTENCY_CONFLICT"


class TurnqueueError(Exception):
    """Base of every error turnqueue raises on purpose."""


class UserFacingError(TurnqueueError):
    """An expected failure, reported to the client as ``userErrors`` with a code."""

    def __init__(self, code: ErrorCode, message: str, field: Sequence[str] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.field = list(field) if field is not None else None

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.code}, {self.message!r})"


class NotFound(UserFacingError):
    def __init__(self, what: str, field: Sequence[str] | None = None) -> None:
        super().__init__(ErrorCode.NOT_FOUND, f"{what} not found", field)


class InvalidInput(UserFacingError):
    def __init__(self, message: str, field: Sequence[str] | None = None) -> None:
        super().__init__(ErrorCode.INVALID_INPUT, message, field)


class Conflict(UserFacingError):
    """Any other expected refusal (busy, queue changed, full, ...)."""


class AuthenticationError(TurnqueueError):
    """Missing or wrong credentials: HTTP 401 (a WebSocket is closed 4403), never a ``userErrors``
    entry. ``str(error)`` is the reason, fit to show the client."""


class StoreError(TurnqueueError):
    """The database failed in a way the engine cannot handle."""
