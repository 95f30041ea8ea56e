"""The domain enums and ``ErrorCode`` registered as GraphQL enums under the contract's names.

Registration marks the domain classes themselves, so schema types annotate with the domain enums
and resolvers pass domain values through unchanged.
"""

from __future__ import annotations

import strawberry

from turnqueue import domain, errors

for _enum in (
    domain.SessionState,
    domain.TurnStatus,
    domain.MessageSource,
    domain.PauseReason,
    domain.HoldReason,
    domain.SendNowScope,
    domain.CancelOutcome,
    errors.ErrorCode,
):
    strawberry.enum(_enum, name=_enum.__name__)

SessionState = domain.SessionState
TurnStatus = domain.TurnStatus
MessageSource = domain.MessageSource
PauseReason = domain.PauseReason
HoldReason = domain.HoldReason
SendNowScope = domain.SendNowScope
CancelOutcome = domain.CancelOutcome
ErrorCode = errors.ErrorCode

__all__ = [
    "CancelOutcome",
    "ErrorCode",
    "HoldReason",
    "MessageSource",
    "PauseReason",
    "SendNowScope",
    "SessionState",
    "TurnStatus",
]
